"""Replay timed alloc/free events over W tokenizer-worker pools, with the recycler's ticks.

Time is integer nanoseconds from 0. The recycler of every pool ticks at 0, I, 2I, ... (I the
recycle interval). A tick at T runs after every event stamped at or before T, so a ``free`` at
t is given back at the first tick at or after t, and an ``alloc`` at exactly T does not see it.
A ``free`` is the last consumer's acknowledgement of the lease; a free of a lease that missed
is ignored. Ticks that change nothing are skipped, since SGLang's would change nothing either.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from mmpool_cli.core.units import align_up
from mmpool_cli.simulate.allocator import MISS_SLOTS, Allocator, PoolRules, allocator_for

SIM_SCHEMA_VERSION = 1

ALLOC = 0
FREE = 1

# One event: (t_ns, ALLOC, id, nbytes, worker) or (t_ns, FREE, id, 0, 0). Events come in time order,
# an id is allocated again only after its free, and a free names a live id (``trace`` checks this).
Event = tuple[int, int, object, int, int]


@dataclass(frozen=True)
class PoolLayout:
    """What each worker's pool looks like: SGLang's split of the budget and its control header."""

    workers: int
    memory_size: int  # per worker: budget // workers
    data_start: int  # the control header: ipc_header_bytes(consumers)
    recycle_ns: int  # the recycler's interval
    rules: PoolRules  # the release's allocator, alignment and slot cap

    @property
    def max_leases(self) -> int:
        return self.rules.max_leases

    @property
    def usable_bytes(self) -> int:
        return self.memory_size - self.data_start


@dataclass
class WorkerStats:
    """What happened in one worker's pool."""

    worker: int
    items: int = 0
    bytes: int = 0
    fallback_items: int = 0  # misses for space, slot-cap misses included
    fallback_bytes: int = 0
    slot_cap_misses: int = 0
    peak_bytes: int = 0
    peak_leases: int = 0
    occupancy_area: int = 0  # leased bytes integrated over nanoseconds
    # at each miss for space: the pool's free bytes and largest free range, summed over misses
    space_miss_free_bytes: int = 0
    space_miss_largest_free: int = 0
    # misses for space where the free bytes (split, or not yet joined at a tick) would have held it
    fragmented_misses: int = 0


@dataclass
class SimResult:
    """The outcome of one simulation: totals, per-worker figures and, on request, each decision."""

    layout: PoolLayout
    events: int
    duration_ns: int
    workers: list[WorkerStats]
    offsets: list[int | None] | None = None  # per alloc event, in order: the lease's offset, None on a miss
    alloc_ids: list[object] | None = None
    alloc_workers: list[int] | None = None
    schema_version: int = field(default=SIM_SCHEMA_VERSION)

    def total(self, name: str) -> int:
        return sum(getattr(w, name) for w in self.workers)


def simulate(events: Iterable[Event], layout: PoolLayout, record: bool = False) -> SimResult:
    """Run ``events`` through ``layout.workers`` pools; ``record`` keeps every alloc's decision."""
    interval = layout.recycle_ns
    n = layout.workers
    make = allocator_for(layout.rules)
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
            continue
        live[key] = (w, start, nbytes, t)
        if tick_at < 0:  # something changed: the next tick has work (or finds none, harmlessly)
            due[w] = -(-t // interval) * interval
    area = [0] * n
    for w, pool in enumerate(pools):
        if 0 <= due[w] <= t:
            _tick(pool, due[w], peak_bytes, peak_leases, w)
        _peak(pool, peak_bytes, peak_leases, w)
        area[w] = pool.area + sum(align_up(nb, alignment) * (t - at) for _, _, nb, at in pool.acked)
    for lease in live.values():
        if lease is not None:
            area[lease[0]] += align_up(lease[2], alignment) * (t - lease[3])
    stats = [
        WorkerStats(
            w,
            items[w],
            nbytes_in[w],
            fb_items[w],
            fb_bytes[w],
            slot_misses[w],
            peak_bytes[w],
            peak_leases[w],
            area[w],
            miss_free[w],
            miss_largest[w],
            fragmented[w],
        )
        for w in range(n)
    ]
    if not record:
        return SimResult(layout, count, t, stats)
    return SimResult(layout, count, t, stats, offsets, ids, workers_of)


def _peak(pool: Allocator, peak_bytes: list[int], peak_leases: list[int], w: int) -> None:
    # between ticks leases only arrive, so the pool is fullest just before a tick
    if pool.leased_bytes > peak_bytes[w]:
        peak_bytes[w] = pool.leased_bytes
    if pool.leases > peak_leases[w]:
        peak_leases[w] = pool.leases


def _tick(pool: Allocator, at: int, peak_bytes: list[int], peak_leases: list[int], w: int) -> None:
    _peak(pool, peak_bytes, peak_leases, w)
    pool.tick(at)
