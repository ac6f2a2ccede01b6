"""What a replay produces: the pools' layout, each worker's figures, and the run's result.

Kept apart from ``replay`` so that every allocator's replay (``replay``, ``cuda_vmm``) builds its
result here without importing another's.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from mmpool_cli.core.units import align_up
from mmpool_cli.pools.allocator import Allocator, PoolRules

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
