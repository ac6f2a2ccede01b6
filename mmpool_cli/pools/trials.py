"""One trial of the budget search: a budget simulated, and the budgets its run decides alike.

A trial may stop early (``StopAt``): once its fallback passes the target it fails, and so do the
budgets its prefix decides alike. ``no_miss_budget`` is where the search's range ends: from it on,
every budget makes the same run, with no miss for space.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Literal

from mmpool_cli.core.units import MiB
from mmpool_cli.pools.allocator import PoolRules
from mmpool_cli.pools.replay import ALLOC, Event, Events, PoolLayout, SimResult, enough_bytes, simulate
from mmpool_cli.traces.events import as_events

Basis = Literal["items", "bytes"]
LayoutFor = Callable[[int], PoolLayout]


@dataclass(frozen=True)
class Trial:
    """One simulated budget, and the budgets up to ``same_until_mb`` that decide every alloc alike.

    A ``stopped`` trial ended once its fallback passed the target: its counts are those of the
    first ``events`` events, and its rate a lower bound (the fallback so far over the whole trace's
    ``trace_items``/``trace_bytes``) that is above the target on the search's basis.
    """

    mb: int
    items: int
    fallback_items: int
    bytes: int
    fallback_bytes: int
    same_until_mb: int = 0
    stopped: bool = False
    events: int = 0  # events replayed
    trace_items: int = 0
    trace_bytes: int = 0

    def rate(self, basis: Basis) -> Fraction:
        """The fallback rate; for a stopped trial, a lower bound of it."""
        if basis == "items":
            whole = self.trace_items if self.stopped else self.items
            return Fraction(self.fallback_items, whole) if whole else Fraction(0)
        whole = self.trace_bytes if self.stopped else self.bytes
        return Fraction(self.fallback_bytes, whole) if whole else Fraction(0)


@dataclass(frozen=True)
class StopAt:
    """When a trial may stop: its fallback past ``items`` (or ``bytes``), of a trace of so many in all."""

    items: int | None
    bytes: int | None
    trace_items: int
    trace_bytes: int


def stop_at(events: Sequence[Event] | Events, target: Fraction, basis: Basis) -> StopAt:
    """The most fallback that still meets ``target``: ``floor(target x the trace's items or bytes)``."""
    if isinstance(events, Events):
        items, nbytes = events.op.count(ALLOC), sum(events.nbytes)  # a free's bytes are 0
    else:
        items = nbytes = 0
        for _, op, _, size, _ in events:
            if op == ALLOC:
                items += 1
                nbytes += size
    whole = items if basis == "items" else nbytes
    most = target.numerator * whole // target.denominator
    return StopAt(most if basis == "items" else None, most if basis == "bytes" else None, items, nbytes)


def layout_for(mb: int, workers: int, data_start: int, recycle_ns: int, rules: PoolRules) -> PoolLayout:
    """The cuda_ipc pools SGLang creates for ``SGLANG_MM_FEATURE_CACHE_MB=mb``."""
    return PoolLayout(workers, mb * MiB // workers, data_start, recycle_ns, rules)


def _same_until(mb: int, size: int, slack: int, layouts: LayoutFor, cap: int) -> int:
    """The largest budget up to ``cap`` whose pools are less than ``slack`` bytes larger than ``size``."""
    lo, hi = mb, cap
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if layouts(mid).memory_size - size < slack:
            lo = mid
        else:
            hi = mid - 1
    return lo


def trial(
    events: Sequence[Event] | Events,
    mb: int,
    layouts: LayoutFor,
    cap: int | None = None,
    alike_from: int = 0,
    stop: StopAt | None = None,
) -> Trial:
    """Simulate ``events`` at budget ``mb``; with ``cap``, say up to which budget it decides alike.

    ``alike_from``: the budget from which every budget makes the same run (``no_miss_budget``).
    ``stop``: end the replay once the fallback passes the target (the trial then fails).
    """
    layout = layouts(mb)
    if stop is None:
        result: SimResult = simulate(events, layout)
    else:
        result = simulate(events, layout, stop_fallback_items=stop.items, stop_fallback_bytes=stop.bytes)
    if cap is None:
        same = mb
    elif alike_from and mb >= alike_from:
        same = cap
    else:
        same = _same_until(mb, layout.memory_size, result.slack_bytes, layouts, cap)
    return Trial(
        mb,
        result.total("items"),
        result.total("fallback_items"),
        result.total("bytes"),
        result.total("fallback_bytes"),
        same,
        result.stopped,
        result.events,
        result.total("items") if stop is None else stop.trace_items,
        result.total("bytes") if stop is None else stop.trace_bytes,
    )


def no_miss_budget(events: Sequence[Event] | Events, layouts: LayoutFor, lowest: int, highest: int) -> int:
    """The smallest budget from which every budget decides every alloc alike, with no miss for space.

    It is the run of pools too large to fill (``pool.UnboundedPool``): from the budget whose pools
    reach ``enough`` bytes on, every larger budget makes exactly that run. ``highest + 1`` if
    that is beyond ``highest``.
    """
    probe = layouts(lowest)
    most = enough_bytes(as_events(events), probe)  # the compiled replay, where it was built
    if most is None:
        from mmpool_cli.pools.cuda_ipc import UnboundedPool

        pools: list[UnboundedPool] = []

        def unbounded(memory_size: int, data_start: int, rules: PoolRules) -> UnboundedPool:
            pools.append(UnboundedPool(memory_size, data_start, rules))
            return pools[-1]

        simulate(events, probe, pool_factory=unbounded)
        most = max(pool.enough for pool in pools)
    if layouts(highest).memory_size < most:
        return highest + 1
    lo, hi = lowest, highest
    while lo < hi:
        mid = (lo + hi) // 2
        if layouts(mid).memory_size >= most:
            hi = mid
        else:
            lo = mid + 1
    return lo
