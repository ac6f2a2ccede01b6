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

from mmpool_cli.sglang.rules import DATA_ALIGNMENT, MAX_INFLIGHT_SLICES, SGLANG_VERSION
from mmpool_cli.simulate.pool import MISS_SLOTS, Pool

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
    max_leases: int = MAX_INFLIGHT_SLICES

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
    sglang_version: str = field(default=SGLANG_VERSION)

    def total(self, name: str) -> int:
        return sum(getattr(w, name) for w in self.workers)


def simulate(events: Iterable[Event], layout: PoolLayout, record: bool = False) -> SimResult:
    """Run ``events`` through ``layout.workers`` pools; ``record`` keeps every alloc's decision."""
    interval = layout.recycle_ns
    pools = [Pool(layout.memory_size, layout.data_start, layout.max_leases) for _ in range(layout.workers)]
    stats = [WorkerStats(w) for w in range(layout.workers)]
    due = [-1] * layout.workers  # the time of the next tick that changes the pool, -1 if none would
    last = [0] * layout.workers  # when occupancy_area was last brought up to date
    live: dict[object, tuple[int, int, int] | None] = {}  # id -> (worker, offset, nbytes); None if missed
    offsets: list[int | None] | None = [] if record else None
    ids: list[object] | None = [] if record else None
    workers_of: list[int] | None = [] if record else None
    count = 0
    t = 0
    for t, op, key, nbytes, w in events:
        count += 1
        if op == FREE:
            lease = live.pop(key)
            if lease is None:
                continue  # that feature went over the CPU path: nothing to give back
            w, start, nbytes = lease
        pool = pools[w]
        tick_at = due[w]
        if 0 <= tick_at < t:
            _tick(pool, stats[w], last, w, tick_at)
            due[w] = tick_at = -1
        if op == FREE:
            pool.ack(start, nbytes)
        else:
            st = stats[w]
            st.items += 1
            st.bytes += nbytes
            st.occupancy_area += pool.leased_bytes * (t - last[w])
            last[w] = t
            start = pool.alloc(nbytes)
            if record:
                offsets.append(start if start >= 0 else None)
                ids.append(key)
                workers_of.append(w)
            if start < 0:
                live[key] = None
                st.fallback_items += 1
                st.fallback_bytes += nbytes
                if start == MISS_SLOTS:
                    st.slot_cap_misses += 1
                else:
                    free = pool.free_bytes
                    st.space_miss_free_bytes += free
                    st.space_miss_largest_free += pool.largest_free
                    if free >= -(-nbytes // DATA_ALIGNMENT) * DATA_ALIGNMENT:
                        st.fragmented_misses += 1
                continue
            live[key] = (w, start, nbytes)
            if pool.leased_bytes > st.peak_bytes:
                st.peak_bytes = pool.leased_bytes
            if pool.leases > st.peak_leases:
                st.peak_leases = pool.leases
        if tick_at < 0 and pool.dirty:
            due[w] = -(-t // interval) * interval
    for w, st in enumerate(stats):
        if 0 <= due[w] <= t:
            _tick(pools[w], st, last, w, due[w])
        st.occupancy_area += pools[w].leased_bytes * (t - last[w])
    return SimResult(layout, count, t, stats, offsets, ids, workers_of)


def _tick(pool: Pool, st: WorkerStats, last: list[int], w: int, at: int) -> None:
    st.occupancy_area += pool.leased_bytes * (at - last[w])
    last[w] = at
    pool.tick()
