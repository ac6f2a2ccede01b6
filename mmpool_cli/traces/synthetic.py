"""A seeded synthetic workload: requests with pooled features, as alloc/free events.

Requests arrive as a Poisson process at a given rate, or from a fixed number of clients that
each send the next request when the previous one finishes; the clients' first requests are spread
evenly over one mean request time (all at t = 0 with ``burst``, the worst case, where clients
with fixed request times stay in lockstep). They are dispatched round-robin to
the tokenizer workers. Each feature of a request is leased when the request arrives and
acknowledged by its last consumer:

* eager (SGLang's default): on receipt by the scheduler, ``ack_delay`` after arrival;
* deferred (Qwen3-VL at TP=1, or the DP encoder): when the vision encoder runs for the item's
  prefill chunk, ``hold`` after arrival, by default at the request's end.

Request durations are fixed or exponentially distributed about their mean. The same seed gives
the same events, to the nanosecond.
"""

from __future__ import annotations

import heapq
import random
from dataclasses import dataclass
from typing import Literal

from mmpool_cli.core.units import NS_PER_S
from mmpool_cli.errors import MmpoolError
from mmpool_cli.traces.events import ALLOC, FREE, Events

Mode = Literal["eager", "deferred"]
Residency = Literal["fixed", "exponential"]
MAX_SYNTHETIC_EVENTS = 10_000_000
MIN_RATE = 1e-6  # keeps arrival times within what a trace can hold (10**9 s)
MAX_RATE = 1e9


@dataclass(frozen=True)
class SyntheticWorkload:
    """The traffic to simulate. Times in integer nanoseconds, sizes in bytes."""

    items: tuple[int, ...]  # bytes of each pooled feature of one request
    requests: int
    rate: float | None = None  # requests per second (Poisson arrivals)
    concurrency: int | None = None  # or this many clients, each waiting for its last request
    duration_ns: int = NS_PER_S  # mean time from a request's arrival to its end
    residency: Residency = "fixed"
    mode: Mode = "eager"
    ack_delay_ns: int = 0  # eager: arrival to the scheduler's acknowledgement
    hold_ns: int | None = None  # deferred: arrival to the acknowledgement; None: the request's end
    seed: int = 0
    # per feature, for cuda_vmm: an image or video feature (packed with its request's others) and
    # its element size; () means every feature is one, of 1-byte elements
    packable: tuple[bool, ...] = ()
    element_sizes: tuple[int, ...] = ()
    burst: bool = False  # concurrency: every client's first request at t = 0


def check_workload(w: SyntheticWorkload) -> None:
    """Raise MmpoolError (exit 2) for a workload that cannot be simulated."""
    if not w.items:
        raise MmpoolError(
            "nothing to simulate: give the features of one request (--feature-size SIZE, or --model NAME with "
            "--image WxH, --video or --audio), a trace to replay (--trace FILE) or a server log (--from FILE)"
        )
    if any(n <= 0 for n in w.items):
        raise MmpoolError("--feature-size: every feature must be at least 1 byte (SGLang cannot pool an empty tensor)")
    if (w.rate is None) == (w.concurrency is None):
        raise MmpoolError("give exactly one of --rate (requests per second) and --concurrency (clients)")
    if w.rate is not None and not MIN_RATE <= w.rate <= MAX_RATE:
        raise MmpoolError(f"--rate: must be from {MIN_RATE:g} to {MAX_RATE:g} requests per second, not {w.rate}")
    if w.concurrency is not None and w.concurrency <= 0:
        raise MmpoolError(f"--concurrency: must be at least 1, not {w.concurrency}")
    if w.requests <= 0:
        raise MmpoolError(f"--requests: must be at least 1, not {w.requests}")
    if 2 * w.requests * len(w.items) > MAX_SYNTHETIC_EVENTS:
        raise MmpoolError(
            f"--requests {w.requests} with {len(w.items)} features each makes more than "
            f"{MAX_SYNTHETIC_EVENTS} events; use fewer requests"
        )
    if w.duration_ns <= 0 and w.concurrency is not None:
        raise MmpoolError("--duration: must be positive with --concurrency (each client waits for its request)")
    if min(w.duration_ns, w.ack_delay_ns, w.hold_ns or 0) < 0:
        raise MmpoolError("--duration, --ack-delay and --hold must not be negative")


def synthesize(w: SyntheticWorkload, workers: int) -> Events:
    """The alloc and free events of ``w`` over ``workers`` pools, in time order; one request a group."""
    check_workload(w)
    rng = random.Random(w.seed)
    exponential = w.residency == "exponential"

    def duration() -> int:
        return round(rng.expovariate(1.0) * w.duration_ns) if exponential else w.duration_ns

    starts: list[tuple[int, int]] = []  # (arrival, duration) in dispatch order
    if w.rate is not None:
        t = 0
        for _ in range(w.requests):
            starts.append((t, duration()))
            t += round(rng.expovariate(w.rate) * NS_PER_S)
    else:
        # clients beyond the number of requests would never send one
        n_clients = min(w.concurrency or 0, w.requests)
        clients = [(0 if w.burst else c * w.duration_ns // (w.concurrency or 1), c) for c in range(n_clients)]
        while len(starts) < w.requests:
            t, client = heapq.heappop(clients)
            d = duration()
            starts.append((t, d))
            heapq.heappush(clients, (t + d, client))
    events: list[tuple[int, int, tuple[int, int, int, int, int]]] = []
    n = len(w.items)
    for r, (arrival, d) in enumerate(starts):
        worker = r % workers
        if w.mode == "eager":
            ack = arrival + w.ack_delay_ns
        else:
            ack = arrival + (d if w.hold_ns is None else w.hold_ns)
        for j, nbytes in enumerate(w.items):
            key = r * n + j
            events.append((arrival, 2 * key, (arrival, ALLOC, key, nbytes, worker)))
            events.append((ack, 2 * key + 1, (ack, FREE, key, 0, 0)))
    events.sort()
    # deferred features (Qwen3-VL at TP 1, the DP encoder) are never packed by cuda_vmm
    packable = [w.mode == "eager" and (w.packable[j] if w.packable else True) for j in range(n)]
    elems = list(w.element_sizes) if w.element_sizes else [1] * n
    out = Events(keep_ids=False)
    for _, _, (t, op, key, nbytes, worker) in events:
        if op == FREE:
            out.free(t, key)
        else:
            j = key % n
            out.alloc(t, key, nbytes, worker, key // n, pack=packable[j], elem=elems[j])
    return out
