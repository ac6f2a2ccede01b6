"""The pool's curve: the fallback of one trace at a set of whole-MiB budgets, each an exact replay.

A capacity planner looks first at the curve, fallback against the memory it costs. Each point is the
replay ``simulate`` makes at that budget alone (the same allocator, the compiled replay where it was
built), so the curve is exact at every point; between points nothing is claimed. Fallback need not
fall as the budget grows: a bigger pool places leases elsewhere, and best fit can then split a range
a smaller pool kept whole (``budget_search`` says more).

The default range runs from the budget whose pools can hold the trace's largest alloc at all (below
it that feature always falls back) to the budget from which no alloc can miss for space
(``trials.no_miss_budget``: every larger budget makes the same run). The points are spread evenly in
whole MiB, as SGLang takes the budget, and run on an executor of ``executors`` (one process per
core, or a Ray cluster), one piece a point, so neither the points nor their figures depend on where
they ran.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from mmpool_cli.core.units import MiB
from mmpool_cli.pools.evaluator import UNLIMITED
from mmpool_cli.pools.executors import Executor, LocalExecutor, Piece, Work
from mmpool_cli.pools.trials import LayoutFor, Trial, no_miss_budget
from mmpool_cli.traces.events import ALLOC, Event, Events, as_events

DEFAULT_POINTS = 64
Progress = Callable[[int], None]  # called with the number of points replayed so far


@dataclass(frozen=True)
class CurvePoint:
    """One budget of the curve and what its replay gave; ``kv_tokens`` is the engine's (None: unknown)."""

    budget_mb: int
    items: int
    fallback_items: int
    bytes: int
    fallback_bytes: int
    kv_tokens: int | None = None

    @property
    def budget_bytes(self) -> int:
        return self.budget_mb * MiB

    def to_data(self) -> dict[str, Any]:
        """The JSON object of the point: integers only; a rate is the counts beside it."""
        return {
            "budget_bytes": self.budget_bytes,
            "items": self.items,
            "fallback_items": self.fallback_items,
            "bytes": self.bytes,
            "fallback_bytes": self.fallback_bytes,
            "kv_tokens": self.kv_tokens,
        }


@dataclass
class PoolCurve:
    """The curve and how its range was chosen (``*_given``: from the user rather than the trace)."""

    points: list[CurvePoint]
    lo_mb: int
    hi_mb: int
    lo_given: bool
    hi_given: bool
    asked_points: int
    feature_mb: int  # the budget from which the largest alloc fits an empty pool (top + 1: none does)
    no_miss_mb: int  # the budget from which no alloc can miss for space (top + 1: none up to the top)
    kv_unknown: str = ""  # where no point has its KV tokens: why, and how to get them
    replayed: int = 0  # the points replayed for the curve; the others were the search's whole trials
    trials: list[Trial] = field(default_factory=list, repr=False)  # the whole replays behind the points

    @property
    def budgets_mb(self) -> list[int]:
        """The budgets of the points, in order."""
        return budgets(self.lo_mb, self.hi_mb, self.asked_points)

    def to_data(self) -> dict[str, Any]:
        return {
            "from_bytes": self.lo_mb * MiB,
            "to_bytes": self.hi_mb * MiB,
            "points_asked": self.asked_points,
            "largest_feature_budget_bytes": self.feature_mb * MiB,
            "no_miss_budget_bytes": self.no_miss_mb * MiB,
        }


def budgets(lo: int, hi: int, points: int) -> list[int]:
    """``points`` whole-MiB budgets spread evenly from ``lo`` to ``hi``, both included; fewer where the
    range has fewer whole MiB (each budget once).

    >>> budgets(10, 20, 3)
    [10, 15, 20]
    >>> budgets(10, 12, 64)
    [10, 11, 12]
    """
    if hi <= lo or points < 2:
        return [lo]
    return sorted({lo + (hi - lo) * i // (points - 1) for i in range(points)})


def largest_alloc_budget(events: Sequence[Event] | Events, layouts: LayoutFor, lowest: int, highest: int) -> int:
    """The smallest budget from ``lowest`` whose pools hold the trace's largest alloc alone, in an empty pool
    (``highest + 1`` if none up to ``highest`` does; ``lowest`` for a trace without allocs)."""
    events = as_events(events)
    biggest = max(range(len(events)), key=lambda i: (events.op[i] == ALLOC, events.nbytes[i]), default=None)
    if biggest is None or events.op[biggest] != ALLOC:
        return lowest
    one = Events(keep_ids=False, requests=events.group is not None)
    pack = bool(events.pack[biggest]) if events.pack is not None else True
    elem = events.elem[biggest] if events.elem is not None else 1
    one.alloc(0, 0, events.nbytes[biggest], 0, 0, pack=pack, elem=elem)
    one.free(0, 0)
    return no_miss_budget(one, layouts, lowest, highest)


def decided(trials: Sequence[Trial], mb: int) -> Trial | None:
    """A trial of ``trials`` (sorted by budget) that replayed the whole trace and decides ``mb`` alike."""
    for t in reversed(trials[: bisect_right([t.mb for t in trials], mb)]):
        if not t.stopped and t.same_until_mb >= mb:
            return t
    return None


def replay_trials(
    events: Events,
    layouts: LayoutFor,
    mbs: Sequence[int],
    *,
    top: int,
    executor: Executor | None = None,
    progress: Progress | None = None,
    known: Sequence[Trial] = (),
) -> list[Trial]:
    """A whole replay deciding each budget of ``mbs`` alike, in the order of ``mbs``: replayed on ``executor``
    (this machine's cores by default), ``top`` the largest budget the pools may take.

    A budget that a trial of ``known`` (a budget search's) replayed whole and decides alike is taken from
    it: its every alloc is decided as at that trial's budget, so its figures are the same, and it is not
    replayed again.
    """
    known = sorted(known, key=lambda t: t.mb)
    found = {mb: t for mb in mbs if (t := decided(known, mb)) is not None}
    if progress is not None and found:
        progress(len(found))
    todo = [mb for mb in mbs if mb not in found]
    run_on = LocalExecutor() if executor is None else executor
    work = Work(events, layouts, top, 0, None)
    try:
        for trials in run_on.run(work, [Piece(mb, mb, UNLIMITED, whole=True) for mb in todo]) if todo else ():
            found[trials[0].mb] = trials[0]
            if progress is not None:
                progress(len(found))
    finally:
        run_on.close()
    return [found[mb] for mb in mbs]


def point(mb: int, trial: Trial) -> CurvePoint:
    """The point at ``mb`` of a whole trial that decides it alike."""
    return CurvePoint(mb, trial.items, trial.fallback_items, trial.bytes, trial.fallback_bytes)


def replay_budgets(
    events: Events,
    layouts: LayoutFor,
    mbs: Sequence[int],
    *,
    top: int,
    executor: Executor | None = None,
    progress: Progress | None = None,
    known: Sequence[Trial] = (),
) -> list[CurvePoint]:
    """The points of ``replay_trials``: ``events`` replayed whole at every budget of ``mbs``, in that order."""
    trials = replay_trials(events, layouts, mbs, top=top, executor=executor, progress=progress, known=known)
    return [point(mb, t) for mb, t in zip(mbs, trials, strict=True)]
