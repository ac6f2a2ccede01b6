"""The whole-MiB ``SGLANG_MM_FEATURE_CACHE_MB`` to recommend: the smallest budget that stays safe above it.

Fallback is not monotonic in the budget: a bigger pool places leases elsewhere, and best fit
can then split a range that a smaller pool kept whole, so a budget just above one that meets
the target can miss it. The default search (``safe``) returns the smallest budget B such that
every whole-MiB budget from B up to U meets the target, where U is ``2 * B``, or the budget at
which no alloc of the trace can miss (every worker's share holds all its allocs at once), or the
largest budget SGLang and mmpool's plan accept, whichever is smallest. It is exact: every budget
from the smallest SGLang accepts up to U is decided, by simulation or by the simulation of a
budget whose pools decide every alloc alike (``SimResult.slack_bytes``: a larger pool differs
only in its last free range, and a run says how much larger that range may grow before any
decision could change). A lower budget that meets the target while some budget above it does not
is reported as fragile. ``scan`` returns the smallest budget that meets the target at all, and
``bisect`` estimates it (it gallops, bisects and checks one MiB below: exact only where more
memory never hurts).

Budgets are independent, so they are simulated in parallel, one process per core; the answer
does not depend on how many there are.
"""

from __future__ import annotations

import multiprocessing
import os
from bisect import bisect_right
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any, Literal

from mmpool_cli.sglang.rules import DATA_ALIGNMENT, MiB
from mmpool_cli.simulate.engine import ALLOC, Event, Events, PoolLayout, SimResult, simulate

Basis = Literal["items", "bytes"]
Method = Literal["safe", "scan", "bisect"]
LayoutFor = Callable[[int], PoolLayout]
Progress = Callable[[int], None]  # called with the number of budgets simulated so far


@dataclass(frozen=True)
class Trial:
    """One simulated budget, and the budgets up to ``same_until_mb`` that decide every alloc alike."""

    mb: int
    items: int
    fallback_items: int
    bytes: int
    fallback_bytes: int
    same_until_mb: int = 0

    def rate(self, basis: Basis) -> Fraction:
        if basis == "items":
            return Fraction(self.fallback_items, self.items) if self.items else Fraction(0)
        return Fraction(self.fallback_bytes, self.bytes) if self.bytes else Fraction(0)


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
    trials: list[Trial] = field(default_factory=list)


def layout_for(mb: int, workers: int, data_start: int, recycle_ns: int) -> PoolLayout:
    """The cuda_ipc pools SGLang creates for ``SGLANG_MM_FEATURE_CACHE_MB=mb``."""
    return PoolLayout(workers, mb * MiB // workers, data_start, recycle_ns)


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


def trial(events: Sequence[Event] | Events, mb: int, layouts: LayoutFor, cap: int | None = None) -> Trial:
    """Simulate ``events`` at budget ``mb``."""
    layout = layouts(mb)
    result: SimResult = simulate(events, layout)
    same = mb if cap is None else _same_until(mb, layout.memory_size, result.slack_bytes, layouts, cap)
    return Trial(
        mb,
        result.total("items"),
        result.total("fallback_items"),
        result.total("bytes"),
        result.total("fallback_bytes"),
        same,
    )


def no_miss_budget(events: Iterable[Event] | Events, layouts: LayoutFor, lowest: int, highest: int) -> int:
    """The smallest budget whose every pool holds all of its worker's allocs at once (then none can miss).

    Best fit always leaves the last range, the one at the end of the pool, at least the bytes
    not yet taken from it; a pool as large as the sum of its allocs never runs out.
    """
    probe = layouts(lowest)
    control = probe.control_bytes
    need = [probe.data_start] * probe.workers
    for _, op, _, nbytes, worker in events:
        if op == ALLOC:
            need[worker] += -(-(control + nbytes) // DATA_ALIGNMENT) * DATA_ALIGNMENT
    most = max(need)
    lo, hi = lowest, highest
    if layouts(hi).memory_size < most:
        return highest + 1  # beyond what can be set
    while lo < hi:
        mid = (lo + hi) // 2
        if layouts(mid).memory_size >= most:
            hi = mid
        else:
            lo = mid + 1
    return lo


# The worker processes' copy of the search's inputs, set before they fork.
_SHARED: dict[str, Any] = {}


def _walk(bounds: tuple[int, int]) -> list[Trial]:
    """Decide every budget from ``lo`` to ``hi``: simulate one, skip those it decides alike, repeat."""
    lo, hi = bounds
    events, layouts, cap = _SHARED["events"], _SHARED["layouts"], _SHARED["cap"]
    out = []
    mb = lo
    while mb <= hi:
        tr = trial(events, mb, layouts, cap)
        out.append(tr)
        mb = tr.same_until_mb + 1
    return out


class _Evaluator:
    """Simulates budgets, in parallel where there is more than one core, and remembers what it learnt."""

    def __init__(
        self, events: Sequence[Event] | Events, layouts: LayoutFor, cap: int, jobs: int, progress: Progress | None
    ) -> None:
        self.events, self.layouts, self.cap = events, layouts, cap
        self.jobs = max(1, jobs)
        self.progress = progress
        self.trials: dict[int, Trial] = {}
        self._starts: list[int] = []  # sorted starts of the trials
        self._pool: Any = None

    def __enter__(self) -> _Evaluator:
        return self

    def __exit__(self, *_: object) -> None:
        if self._pool is not None:
            self._pool.terminate()
            self._pool.join()

    def _workers(self) -> Any:
        if self._pool is None and self.jobs > 1 and "fork" in multiprocessing.get_all_start_methods():
            _SHARED.update(events=self.events, layouts=self.layouts, cap=self.cap)
            self._pool = multiprocessing.get_context("fork").Pool(self.jobs)
        return self._pool

    def _add(self, trials: Iterable[Trial]) -> None:
        for tr in trials:
            if tr.mb not in self.trials:
                self.trials[tr.mb] = tr
        self._starts = sorted(self.trials)
        if self.progress is not None:
            self.progress(len(self.trials))

    def known(self, mb: int) -> Trial | None:
        """The trial that decides ``mb``, if one has been simulated."""
        i = bisect_right(self._starts, mb) - 1
        if i >= 0:
            tr = self.trials[self._starts[i]]
            if tr.same_until_mb >= mb:
                return tr
        return None

    def get(self, mb: int) -> Trial:
        tr = self.known(mb)
        if tr is None:
            self._add([trial(self.events, mb, self.layouts, self.cap)])
            tr = self.trials[mb]
        return tr

    def many(self, mbs: Sequence[int]) -> list[Trial]:
        todo = sorted({mb for mb in mbs if self.known(mb) is None})
        pool = self._workers() if len(todo) > 1 else None
        if pool is None:
            for mb in todo:
                self.get(mb)
        else:
            _SHARED["cap"] = self.cap
            self._add(tr for part in pool.map(_walk, [(mb, mb) for mb in todo]) for tr in part)
        return [self.get(mb) for mb in mbs]

    def walk(self, lo: int, hi: int) -> None:
        """Decide every budget from ``lo`` to ``hi``."""
        gaps = self._gaps(lo, hi)
        if not gaps:
            return
        pool = self._workers()
        if pool is None:
            for a, b in gaps:
                mb = a
                while mb <= b:
                    tr = self.known(mb) or self.get(mb)
                    mb = tr.same_until_mb + 1
            return
        # pieces small enough to keep every core busy and the progress moving
        span = sum(b - a + 1 for a, b in gaps)
        step = max(1, -(-span // (4 * self.jobs)))
        pieces = [(a, min(a + step - 1, b)) for a, b in gaps for a in range(a, b + 1, step)]
        for part in pool.imap_unordered(_walk, pieces):
            self._add(part)
        # a piece's last trial may stop short of the next piece's start: decide what is left
        self.walk(lo, hi)

    def _gaps(self, lo: int, hi: int) -> list[tuple[int, int]]:
        gaps = []
        mb = lo
        while mb <= hi:
            tr = self.known(mb)
            if tr is not None:
                mb = tr.same_until_mb + 1
                continue
            i = bisect_right(self._starts, mb)
            end = min(hi, self._starts[i] - 1) if i < len(self._starts) else hi
            gaps.append((mb, end))
            mb = end + 1
        return gaps


def default_jobs() -> int:
    """Every core this process may use."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


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
    progress: Progress | None = None,
) -> BudgetSearch:
    """Search the whole-MiB budgets from ``lowest`` to ``highest`` (those SGLang and plan accept).

    ``layouts(mb)`` is the pools SGLang creates for ``mb``.
    """
    no_miss = no_miss_budget(events, layouts, lowest, highest)
    top = min(no_miss, highest)
    search = BudgetSearch(target, basis, method, None, lowest, top_mb=top, no_miss_mb=no_miss)
    with _Evaluator(events, layouts, top, default_jobs() if jobs is None else jobs, progress) as ev:

        def meets(mb: int) -> bool:
            return ev.get(mb).rate(basis) <= target

        def done() -> BudgetSearch:
            search.trials = [ev.trials[mb] for mb in sorted(ev.trials)]
            return search

        if not meets(top):
            return done()  # e.g. more than 4096 features in flight: no budget avoids the slot cap
        estimate = _bisect(ev, lowest, top, basis, target)
        if method == "bisect":
            search.smallest_mb = estimate
            return done()
        if method == "scan":
            ev.walk(lowest, estimate)
            search.smallest_mb = next(mb for mb in range(lowest, estimate + 1) if meets(mb))
            return done()
        safe = estimate
        while True:  # move up past every failing budget within reach of the candidate
            upper = min(2 * safe, top)
            ev.walk(safe, upper)
            failing = [mb for mb in range(safe, upper + 1) if not meets(mb)]
            if not failing:
                break
            safe = failing[-1] + 1
        ev.walk(lowest, safe)  # and below it: a lower budget may be safe too, or fragile
        lowest_meeting = next(mb for mb in range(lowest, safe + 1) if meets(mb))
        fail_above = top + 1  # the lowest failing budget above mb, walking down
        for mb in range(safe, lowest - 1, -1):
            if not meets(mb):
                fail_above = mb
            elif fail_above > min(2 * mb, top):
                safe = mb
        search.smallest_mb = safe
        search.upper_mb = min(2 * safe, top)
        search.fragile_mb = lowest_meeting if lowest_meeting < safe else None
        return done()


def _bisect(ev: _Evaluator, lowest: int, top: int, basis: Basis, target: Fraction) -> int:
    """The smallest meeting budget if more memory never hurt: gallop up, then bisect, ``jobs`` at a time."""
    below, above = lowest - 1, lowest  # below misses the target (or is invalid); above meets it
    while ev.get(above).rate(basis) > target:
        below, above = above, min(2 * above, top)
    while above - below > 1:
        k = min(ev.jobs, above - below - 1)
        points = [below + (above - below) * (j + 1) // (k + 1) for j in range(k)]
        points = sorted(set(points))
        results = ev.many(points)
        for mb, tr in zip(points, results, strict=True):
            if tr.rate(basis) <= target:
                above = mb
                break
            below = mb
    return above
