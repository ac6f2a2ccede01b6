"""The whole-MiB ``SGLANG_MM_FEATURE_CACHE_MB`` to recommend: the smallest budget that stays safe above it.

Fallback is not monotonic in the budget: a bigger pool places leases elsewhere, and best fit
can then split a range that a smaller pool kept whole, so a budget just above one that meets
the target can miss it. The default search (``safe``) returns the smallest budget B such that
every whole-MiB budget from B up to U meets the target, where U is ``2 * B``, or the budget at
which no alloc of the trace can miss (every worker's share holds all its allocs at once), or the
largest budget SGLang and mmpool's plan accept, whichever is smallest. It is exact: every budget
the answer depends on is decided, by simulation or by the simulation of a budget whose pools
decide every alloc alike (``SimResult.slack_bytes``: a larger pool differs
only in its last free range, and a run says how much larger that range may grow before any
decision could change). A lower budget that meets the target while some budget above it does not
is reported as fragile. ``scan`` returns the smallest budget that meets the target at all, and
``bisect`` estimates it (it gallops, bisects and checks one MiB below: exact only where more
memory never hurts).

A trial only has to run the whole trace when the budget meets the target: a replay stops at the
miss that takes its fallback past ``floor(target x the trace's items)`` (bytes likewise), and the
budgets its prefix decides alike fail with it (``Trial.stopped``). Below the candidate, the
lowest budget that meets the target needs every budget under it decided (the fragile figure);
a budget b above that one is ruled out as safe by any failing budget from b to ``2 * b``.

Budgets are independent, so they are simulated in parallel (``evaluator``, on an executor of
``executors``: one process per core, or a Ray cluster); neither the answer nor the trials depend
on how many cores there are or where they run.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Literal

from mmpool_cli.pools.evaluator import BISECT_POINTS, Evaluator, Progress, SearchLimit
from mmpool_cli.pools.executors import Executor, LocalExecutor
from mmpool_cli.pools.replay import Event, Events
from mmpool_cli.pools.trials import (
    Basis,
    LayoutFor,
    StopAt,
    Trial,
    layout_for,
    no_miss_budget,
    stop_at,
    trial,
)
from mmpool_cli.traces.events import as_events

__all__ = [
    "Basis",
    "BudgetSearch",
    "LayoutFor",
    "Method",
    "Progress",
    "StopAt",
    "Trial",
    "layout_for",
    "no_miss_budget",
    "smallest_budget",
    "stop_at",
    "trial",
]

Method = Literal["safe", "scan", "bisect"]


@dataclass
class BudgetSearch:
    """The outcome of a search: the budget (None if none up to the top meets the target) and every trial."""

    target: Fraction
    basis: Basis
    method: Method
    smallest_mb: int | None
    lowest_valid_mb: int
    upper_mb: int | None = None  # safe: every budget from smallest_mb to this one meets the target
    fragile_mb: int | None = None  # a lower budget that meets the target, with a failing one above it
    top_mb: int = 0  # the largest budget considered (no alloc can miss, or the most plan accepts)
    no_miss_mb: int = 0  # the budget from which no alloc of the trace can miss for space
    exact: bool = True  # False: the simulation limit stopped the check (see checked_mb)
    checked_mb: tuple[int, int] | None = None  # the budgets decided, every one meeting the target, when not exact
    trials: list[Trial] = field(default_factory=list)
    limit_events: int | None = None  # the replayed events the proof could spend (--search-limit)
    spent_events: int = 0  # replayed events, every trial's
    undecided: tuple[int, int, int] | None = None  # not exact: (budgets no trial decides, from, to) of the proof
    more_events: int = 0  # not exact: at most this many replayed events decide them (each trial replays the trace)


def smallest_budget(
    events: Sequence[Event] | Events,
    *,
    layouts: LayoutFor,
    lowest: int,
    highest: int,
    target: Fraction = Fraction(0),
    basis: Basis = "items",
    method: Method = "safe",
    jobs: int | None = None,
    executor: Executor | None = None,
    progress: Progress | None = None,
    max_events: int | None = None,
    early_stop: bool = True,
    known: Sequence[Trial] = (),
) -> BudgetSearch:
    """Search the whole-MiB budgets from ``lowest`` to ``highest`` (those SGLang and plan accept).

    ``layouts(mb)`` is the pools SGLang creates for ``mb``. ``max_events`` bounds the events the
    safe and scan searches replay to prove their answer (past the bisection's estimate): past it the
    answer is the candidate so far, ``exact`` False, with the budgets checked in ``checked_mb`` and
    the work left in ``undecided``/``more_events``. The trials run on ``executor`` (this process and
    ``jobs`` forked workers by default); which trials run depends on neither. ``early_stop`` False
    replays every trial whole (the same answer, at more cost). ``known``: trials already replayed over
    the same events and pools (the curve's), taken as this search's own; an exact answer is the same
    with or without them, and they count in ``spent_events`` but not against ``max_events``.
    """
    events = as_events(events)  # once: every trial replays the same columns
    no_miss = no_miss_budget(events, layouts, lowest, highest)
    top = min(no_miss, highest)
    search = BudgetSearch(target, basis, method, None, lowest, top_mb=top, no_miss_mb=no_miss)
    run_on = LocalExecutor(jobs) if executor is None else executor
    with Evaluator(events, layouts, top, run_on, progress, no_miss) as ev:
        ev.seed(known)

        def meets(mb: int) -> bool:
            return ev.get(mb).rate(basis) <= target

        def done() -> BudgetSearch:
            search.trials = [ev.trials[mb] for mb in sorted(ev.trials)]
            search.spent_events = ev.spent
            return search

        def unproven(lo: int, hi: int) -> BudgetSearch:
            search.exact = False
            count = ev.undecided(lo, hi)
            search.undecided = (count, lo, hi)
            search.more_events = count * len(events)
            return done()

        # the top runs whole: when it fails, its figures are why no budget meets the target
        if ev.get(top, whole=True).rate(basis) > target:
            return done()  # e.g. more than 4096 features in flight: no budget avoids the slot cap
        ev.stop = stop_at(events, target, basis) if early_stop else None
        estimate = _bisect(ev, lowest, top, basis, target)
        if method == "bisect":
            search.smallest_mb = estimate
            return done()
        if max_events is not None:
            ev.limit = ev.spent + max_events
            search.limit_events = max_events
        if method == "scan":
            try:
                ev.walk(lowest, estimate)
            except SearchLimit:
                search.smallest_mb = estimate
                search.checked_mb = (_decided_down(ev, estimate, lowest, basis, target), estimate)
                return unproven(lowest, estimate)
            search.smallest_mb = next(mb for mb in range(lowest, estimate + 1) if meets(mb))
            return done()
        safe = estimate
        try:
            while True:  # move up past every failing budget within reach of the candidate
                upper = min(2 * safe, top)
                ev.walk(safe, upper)
                failing = [mb for mb in range(safe, upper + 1) if not meets(mb)]
                if not failing:
                    break
                safe = failing[-1] + 1
        except SearchLimit:
            search.smallest_mb = safe
            search.checked_mb = (safe, _decided_up(ev, safe, basis, target))
            return unproven(lowest, min(2 * safe, top))
        search.upper_mb = min(2 * safe, top)
        try:  # and below it: a lower budget may be safe too, or fragile
            lowest_meeting = _lowest_meeting(ev, lowest, safe, basis, target)
            safe = _safe_below(ev, lowest_meeting, safe, top, basis, target)
        except SearchLimit:
            search.smallest_mb = safe  # safe as stated; a lower one is not ruled out
            search.checked_mb = (_decided_down(ev, safe, lowest, basis, target), search.upper_mb)
            return unproven(lowest, search.upper_mb)
        search.smallest_mb = safe
        search.upper_mb = min(2 * safe, top)
        search.fragile_mb = lowest_meeting if lowest_meeting < safe else None
        return done()


def _lowest_meeting(ev: Evaluator, lowest: int, safe: int, basis: Basis, target: Fraction) -> int:
    """The lowest budget that meets the target (``safe`` does): every budget below it decided, failing.

    One walk over every budget below ``safe``, split across the cores: walking it in growing
    windows instead, to stop at the first budget that meets, costs more trials (each window's
    pieces start trials of their own) and saves only where that budget is far below ``safe``.
    """
    ev.walk(lowest, safe)
    return next(mb for mb in range(lowest, safe + 1) if ev.get(mb).rate(basis) <= target)


def _safe_below(ev: Evaluator, meeting: int, safe: int, top: int, basis: Basis, target: Fraction) -> int:
    """The smallest safe budget from ``meeting`` (the lowest that meets the target) to ``safe``.

    Walking down from ``safe``: a budget b is safe when every budget from b to ``min(2b, top)``
    meets the target, so the lowest known failure above b rules it out while within that reach,
    and b is simulated only where none is.
    """
    fail_above = next((mb for mb in sorted(ev.trials) if mb > safe and ev.trials[mb].rate(basis) > target), top + 1)
    for mb in range(safe - 1, meeting - 1, -1):
        reach = min(2 * mb, top)
        if fail_above <= reach:
            continue
        if ev.get(mb).rate(basis) > target:
            fail_above = mb
            continue
        ev.walk(mb, reach)
        failing = next((x for x in range(mb, reach + 1) if ev.get(x).rate(basis) > target), None)
        if failing is None:
            safe = mb
        else:
            fail_above = failing
    return safe


def _decided_up(ev: Evaluator, mb: int, basis: Basis, target: Fraction) -> int:
    """The last budget of the run from ``mb`` up that is decided and meets the target."""
    while True:
        tr = ev.known(mb + 1)
        if tr is None or tr.rate(basis) > target:
            return mb
        mb = max(mb + 1, min(tr.same_until_mb, ev.cap))


def _decided_down(ev: Evaluator, mb: int, lowest: int, basis: Basis, target: Fraction) -> int:
    """The first budget of the run down from ``mb`` that is decided and meets the target (a decided failure
    below ends it: ``checked_mb`` says that every budget of it meets the target)."""
    while mb > lowest:
        tr = ev.known(mb - 1)
        if tr is None or tr.rate(basis) > target:
            break
        mb -= 1
    return mb


def _bisect(ev: Evaluator, lowest: int, top: int, basis: Basis, target: Fraction) -> int:
    """The smallest meeting budget if more memory never hurt: gallop up, then bisect, ``BISECT_POINTS`` at a time."""
    below, above = lowest - 1, lowest  # below misses the target (or is invalid); above meets it
    while ev.get(above).rate(basis) > target:
        below, above = above, min(2 * above, top)
    while above - below > 1:
        k = min(BISECT_POINTS, above - below - 1)
        points = [below + (above - below) * (j + 1) // (k + 1) for j in range(k)]
        points = sorted(set(points))
        results = ev.many(points)
        for mb, tr in zip(points, results, strict=True):
            if tr.rate(basis) <= target:
                above = mb
                break
            below = mb
    return above
