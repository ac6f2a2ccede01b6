"""Replay timed alloc/free events over W tokenizer-worker pools, with the recycler's ticks.

Time is integer nanoseconds from 0. The recycler of every pool ticks at 0, I, 2I, ... (I the
recycle interval). A tick at T runs after every event stamped at or before T, so a ``free`` at
t is given back at the first tick at or after t, and an ``alloc`` at exactly T does not see it.
A ``free`` is the last consumer's acknowledgement of the lease; a free of a lease that missed
is ignored. Ticks that change nothing are skipped, since SGLang's would change nothing either.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from mmpool_cli.core.units import align_up
from mmpool_cli.kernels import native
from mmpool_cli.pools.allocator import MISS_SLOTS, Allocator, AllocatorFactory, PoolRules
from mmpool_cli.pools.results import SIM_SCHEMA_VERSION, PoolLayout, SimResult, WorkerStats, _tick, finish
from mmpool_cli.traces.events import ALLOC, FREE, Event, Events, as_events

__all__ = [
    "ALLOC",
    "FREE",
    "SIM_SCHEMA_VERSION",
    "Event",
    "Events",
    "PoolLayout",
    "SimResult",
    "WorkerStats",
    "allocator_for",
    "finish",
    "simulate",
]


def allocator_for(rules: PoolRules) -> AllocatorFactory:
    """The allocator that ``rules`` name; a name no allocator has is a bug, not a user error."""
    from mmpool_cli.pools import cuda_ipc

    # cuda_vmm's chunks come from the same free list; simulate.cuda_vmm packs requests above it
    allocators: dict[str, AllocatorFactory] = {"cuda_ipc": cuda_ipc.Pool, "cuda_vmm": cuda_ipc.Pool}
    return allocators[rules.allocator]


PoolFactory = Callable[[int, int, PoolRules], Allocator]  # (memory_size, data_start, rules) -> a pool


NO_STOP = 1 << 80  # more fallback than any trace can have (10**7 allocs of at most 2**44 bytes)


def simulate(
    events: Iterable[Event] | Events,
    layout: PoolLayout,
    record: bool = False,
    pool_factory: PoolFactory | None = None,
    *,
    stop_fallback_items: int | None = None,
    stop_fallback_bytes: int | None = None,
) -> SimResult:
    """Run ``events`` through ``layout.workers`` pools; ``record`` keeps every alloc's decision.

    ``pool_factory`` makes each worker's pool (an instrumented ``Pool``, say, for a picture).
    The run stops right after the alloc whose miss takes the fallback of all workers past
    ``stop_fallback_items`` items or ``stop_fallback_bytes`` bytes: the result is then that of the
    trace cut after that alloc (``stopped`` True, ``events`` the events processed), and its
    ``slack_bytes`` covers that prefix, so every budget within it passes the limit too.
    """
    if pool_factory is None and layout.transport == "cuda_ipc" and native.FAST is not None:
        return _simulate_native(as_events(events), layout, record, stop_fallback_items, stop_fallback_bytes)
    make = pool_factory or allocator_for(layout.rules)
    stop_items = NO_STOP if stop_fallback_items is None else stop_fallback_items
    stop_bytes = NO_STOP if stop_fallback_bytes is None else stop_fallback_bytes
    if layout.transport == "cuda_vmm":
        from mmpool_cli.pools.cuda_vmm import simulate_vmm

        return simulate_vmm(as_events(events), layout, record, make, stop_items, stop_bytes)
    interval = layout.recycle_ns
    n = layout.workers
    alignment = layout.rules.alignment
    pools = [make(layout.memory_size, layout.data_start, layout.rules) for _ in range(n)]
    allocs = [p.alloc for p in pools]
    acks = [p.acked.append for p in pools]
    # per-worker counters in plain lists: the loop below is the hot path of every simulation
    items, nbytes_in, fb_items, fb_bytes, slot_misses = [0] * n, [0] * n, [0] * n, [0] * n, [0] * n
    peak_bytes, peak_leases = [0] * n, [0] * n
    miss_free, miss_largest, fragmented = [0] * n, [0] * n, [0] * n
    due = [-1] * n  # the time of the next tick that changes the pool, -1 if none would
    # id -> (worker, offset, nbytes, time leased); None if it missed
    live: dict[object, tuple[int, int, int, int] | None] = {}
    offsets: list[int | None] = []
    ids: list[object] = []
    workers_of: list[int] = []
    usable = layout.usable_bytes
    count = 0
    t = 0
    missed = missed_bytes = 0  # fallback of all workers, for the stop
    stopped = False
    for t, op, key, nbytes, w in events:
        count += 1
        if op == FREE:
            lease = live.pop(key)
            if lease is None:
                continue  # that feature went over the CPU path: nothing to give back
            w = lease[0]
            tick_at = due[w]
            if 0 <= tick_at < t:
                _tick(pools[w], tick_at, peak_bytes, peak_leases, w)
                tick_at = -1
            acks[w](lease)  # given back at the next tick
            if tick_at < 0:
                due[w] = -(-t // interval) * interval
            continue
        tick_at = due[w]
        if 0 <= tick_at < t:
            _tick(pools[w], tick_at, peak_bytes, peak_leases, w)
            due[w] = tick_at = -1
        items[w] += 1
        nbytes_in[w] += nbytes
        start = allocs[w](nbytes)
        if record:
            offsets.append(start if start >= 0 else None)
            ids.append(key)
            workers_of.append(w)
        if start < 0:
            live[key] = None
            fb_items[w] += 1
            fb_bytes[w] += nbytes
            if start == MISS_SLOTS:
                slot_misses[w] += 1
            else:
                pool = pools[w]
                free = usable - pool.leased_bytes
                miss_free[w] += free
                miss_largest[w] += pool.largest_free
                if free >= align_up(nbytes, alignment):
                    fragmented[w] += 1
            missed += 1
            missed_bytes += nbytes
            if missed > stop_items or missed_bytes > stop_bytes:
                stopped = True
                break
            continue
        live[key] = (w, start, nbytes, t)
        if tick_at < 0:  # something changed: the next tick has work (or finds none, harmlessly)
            due[w] = -(-t // interval) * interval
    if record and isinstance(events, Events) and events.ids is not None:
        ids = events.ids  # the trace's own ids, in alloc order
    columns = [items, nbytes_in, fb_items, fb_bytes, slot_misses, peak_bytes, peak_leases, miss_free, miss_largest]
    if stopped and record:
        ids = ids[: len(offsets)]
    return finish(
        pools, live.values(), due, layout, count, t, [*columns, fragmented], record, offsets, ids, workers_of, stopped
    )


_U64 = (1 << 64) - 1  # the compiled replay takes a bytes limit as two 64-bit halves (all ones: none)


# the compiled replay's answer: (events, t, stopped, slack, enough, per-worker rows, offsets, workers)
_Answer = tuple[int, int, int, int, int, list[tuple[int, ...]], list[int | None] | None, list[int] | None]


def _replay_native(
    events: Events, layout: PoolLayout, record: bool, stop_items: int | None, stop_bytes: int | None, unbounded: bool
) -> _Answer:
    assert native.FAST is not None
    bytes_limit = _U64 << 64 | _U64 if stop_bytes is None else stop_bytes
    answer: _Answer = native.FAST.replay(
        events.t,
        events.op,
        events.key,
        events.nbytes,
        events.worker,
        layout.workers,
        layout.memory_size,
        layout.data_start,
        layout.recycle_ns,
        layout.rules.alignment,
        layout.rules.max_leases,
        record,
        -1 if stop_items is None else stop_items,
        bytes_limit >> 64,
        bytes_limit & _U64,
        unbounded,
    )
    return answer


def native_result(layout: PoolLayout, answer: _Answer) -> SimResult:
    """The result of ``layout``'s pools from a compiled replay's answer (over columns, or as a trace is read)."""
    count, t, stopped, slack, _, rows, _, _ = answer
    return SimResult(layout, count, t, [WorkerStats(*row) for row in rows], slack_bytes=slack, stopped=bool(stopped))


def _simulate_native(
    events: Events, layout: PoolLayout, record: bool, stop_items: int | None, stop_bytes: int | None
) -> SimResult:
    """``simulate`` through the compiled replay (``native.FAST``): the same rules, figure for figure."""
    answer = _replay_native(events, layout, record, stop_items, stop_bytes, unbounded=False)
    result = native_result(layout, answer)
    offsets, owners = answer[6], answer[7]
    if record and offsets is not None and owners is not None:
        ids = events.ids
        if ids is None:  # the lease numbers stand for the ids, as in the Python replay
            ids = [k for k, op in zip(events.key, events.op, strict=True) if op == ALLOC]
        result.offsets, result.alloc_ids, result.alloc_workers = offsets, ids[: len(offsets)], owners
    return result


def enough_bytes(events: Events, layout: PoolLayout) -> int | None:
    """With the compiled replay: the smallest pool that decides every alloc as an unbounded one does
    (``cuda_ipc.UnboundedPool.enough``, the largest over the workers); None without it."""
    if native.FAST is None or layout.transport != "cuda_ipc":
        return None
    return _replay_native(events, layout, False, None, None, unbounded=True)[4]
