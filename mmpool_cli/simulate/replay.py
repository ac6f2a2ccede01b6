"""Replay timed alloc/free events over W tokenizer-worker pools, with the recycler's ticks.

Time is integer nanoseconds from 0. The recycler of every pool ticks at 0, I, 2I, ... (I the
recycle interval). A tick at T runs after every event stamped at or before T, so a ``free`` at
t is given back at the first tick at or after t, and an ``alloc`` at exactly T does not see it.
A ``free`` is the last consumer's acknowledgement of the lease; a free of a lease that missed
is ignored. Ticks that change nothing are skipped, since SGLang's would change nothing either.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from mmpool_cli.core.units import align_up
from mmpool_cli.simulate import native
from mmpool_cli.simulate.allocator import MISS_SLOTS, Allocator, PoolRules, allocator_for
from mmpool_cli.simulate.events import ALLOC, FREE, Event, Events, as_events

__all__ = ["ALLOC", "FREE", "Event", "Events", "PoolLayout", "SimResult", "WorkerStats", "simulate"]

SIM_SCHEMA_VERSION = 1


@dataclass(frozen=True)
class PoolLayout:
    """What each worker's pool looks like: SGLang's split of the budget and its control bytes.

    cuda_ipc: ``memory_size`` is the worker's share and ``data_start`` the control header in
    front of the data. cuda_vmm: ``memory_size`` is the share rounded down to the VMM
    granularity, ``data_start`` is 0, ``control_bytes`` the ack words in front of every chunk,
    and there is no slot cap.
    """

    workers: int
    memory_size: int  # per worker: budget // workers (cuda_vmm: rounded down to the granularity)
    data_start: int  # the control header: ipc_header_bytes(consumers); 0 under cuda_vmm
    recycle_ns: int  # the recycler's interval
    rules: PoolRules  # the release's allocator, alignment and slot cap

    @property
    def max_leases(self) -> int:
        return self.rules.max_leases

    @property
    def transport(self) -> str:
        return self.rules.allocator

    @property
    def control_bytes(self) -> int:
        """cuda_vmm: the ack words at the head of each chunk."""
        return self.rules.control_bytes

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
    offsets: list[int | None] | None = None  # per alloc event, in order: the data's offset, None on a miss
    alloc_ids: list[object] | None = None
    alloc_workers: list[int] | None = None
    # every budget whose pools are at most this many bytes larger (exclusive) decides every alloc alike
    # (of the events processed: the prefix, when the run stopped early)
    slack_bytes: int = 0
    # the fallback passed ``stop_fallback_items``/``stop_fallback_bytes``: the figures cover the first ``events``
    stopped: bool = False
    schema_version: int = field(default=SIM_SCHEMA_VERSION)

    def total(self, name: str) -> int:
        return sum(getattr(w, name) for w in self.workers)


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
        from mmpool_cli.simulate.cuda_vmm import simulate_vmm

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


def _simulate_native(
    events: Events, layout: PoolLayout, record: bool, stop_items: int | None, stop_bytes: int | None
) -> SimResult:
    """``simulate`` through the compiled replay (``native.FAST``): the same rules, figure for figure."""
    count, t, stopped, slack, _, rows, offsets, owners = _replay_native(
        events, layout, record, stop_items, stop_bytes, unbounded=False
    )
    result = SimResult(layout, count, t, [WorkerStats(*row) for row in rows], slack_bytes=slack, stopped=bool(stopped))
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


def finish(
    pools: list[Allocator],
    leases: Iterable[tuple[int, int, int, int] | None],
    due: list[int],
    layout: PoolLayout,
    count: int,
    t: int,
    columns: list[list[int]],
    record: bool,
    offsets: list[int | None],
    ids: list[object],
    workers_of: list[int],
    stopped: bool = False,
) -> SimResult:
    """The result of a replay that ended at ``t``: the last ticks, the occupancy still in flight, the figures."""
    items, nbytes_in, fb_items, fb_bytes, slot_misses, peak_bytes, peak_leases, miss_free, miss_largest, fragmented = (
        columns
    )
    n = layout.workers
    alignment = layout.rules.alignment
    area = [0] * n
    for w, pool in enumerate(pools):
        if 0 <= due[w] <= t:
            _tick(pool, due[w], peak_bytes, peak_leases, w)
        _peak(pool, peak_bytes, peak_leases, w)
        area[w] = pool.area + sum(align_up(nb, alignment) * (t - at) for _, _, nb, at in pool.acked)
    for lease in leases:
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
    slack = min(pool.slack for pool in pools)
    if not record:
        return SimResult(layout, count, t, stats, slack_bytes=slack, stopped=stopped)
    return SimResult(layout, count, t, stats, offsets, ids, workers_of, slack_bytes=slack, stopped=stopped)


def _peak(pool: Allocator, peak_bytes: list[int], peak_leases: list[int], w: int) -> None:
    # between ticks leases only arrive, so the pool is fullest just before a tick
    if pool.leased_bytes > peak_bytes[w]:
        peak_bytes[w] = pool.leased_bytes
    if pool.leases > peak_leases[w]:
        peak_leases[w] = pool.leases


def _tick(pool: Allocator, at: int, peak_bytes: list[int], peak_leases: list[int], w: int) -> None:
    _peak(pool, peak_bytes, peak_leases, w)
    pool.tick(at)
