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

Budgets are independent, so they are simulated in parallel, one process per core; the answer
does not depend on how many there are.
"""

from __future__ import annotations

import os
from bisect import bisect_right
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any, Literal

from mmpool_cli.core.units import MiB
from mmpool_cli.simulate.allocator import PoolRules
from mmpool_cli.simulate.events import as_events
from mmpool_cli.simulate.replay import ALLOC, Event, Events, PoolLayout, SimResult, enough_bytes, simulate

Basis = Literal["items", "bytes"]
Method = Literal["safe", "scan", "bisect"]
LayoutFor = Callable[[int], PoolLayout]
Progress = Callable[[int], None]  # called with the number of budgets simulated so far


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
        from mmpool_cli.simulate.cuda_ipc import UnboundedPool

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


# The worker processes' copy of the search's inputs, set before they fork.
_SHARED: dict[str, Any] = {}


def _walk(bounds: tuple[int, int, int]) -> list[Trial]:
    """Decide the budgets from ``lo`` to ``hi``, at most ``most`` simulations: simulate one, skip those
    it decides alike, repeat."""
    lo, hi, most = bounds
    events, layouts, cap, alike = _SHARED["events"], _SHARED["layouts"], _SHARED["cap"], _SHARED["alike"]
    out: list[Trial] = []
    mb = lo
    while mb <= hi and len(out) < most:
        tr = trial(events, mb, layouts, cap, alike, _SHARED["stop"])
        out.append(tr)
        mb = tr.same_until_mb + 1
    return out


def _worker_start() -> None:
    """In each worker: Ctrl-C is the parent's to handle, and the worker dies with its parent."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG: Linux only
        if os.getppid() == 1:  # the parent died before prctl: nothing to work for
            os._exit(0)
    except (OSError, AttributeError):
        pass


class SearchLimit(Exception):
    """More simulations than the search may make."""


class _Evaluator:
    """Simulates budgets, in parallel where there is more than one core, and remembers what it learnt."""

    def __init__(
        self,
        events: Sequence[Event] | Events,
        layouts: LayoutFor,
        cap: int,
        jobs: int,
        progress: Progress | None,
        alike_from: int = 0,
    ) -> None:
        self.events, self.layouts, self.cap, self.alike = events, layouts, cap, alike_from
        self.stop: StopAt | None = None  # set before the first trial that may stop (and before forking)
        self.limit = 1 << 62
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
        import multiprocessing  # here: a plain simulate never needs it, and it costs start-up time

        if self._pool is None and self.jobs > 1 and "fork" in multiprocessing.get_all_start_methods():
            _SHARED.update(events=self.events, layouts=self.layouts, cap=self.cap, alike=self.alike, stop=self.stop)
            self._pool = multiprocessing.get_context("fork").Pool(self.jobs, initializer=_worker_start)
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

    def get(self, mb: int, whole: bool = False) -> Trial:
        """The trial that decides ``mb``, simulated if need be (``whole``: never stopped early)."""
        tr = self.known(mb)
        if tr is None:
            self._add([trial(self.events, mb, self.layouts, self.cap, self.alike, None if whole else self.stop)])
            tr = self.trials[mb]
        return tr

    def many(self, mbs: Sequence[int]) -> list[Trial]:
        todo = sorted({mb for mb in mbs if self.known(mb) is None})
        pool = self._workers() if len(todo) > 1 else None
        if pool is None:
            for mb in todo:
                self.get(mb)
        else:
            self._add(tr for part in pool.map(_walk, [(mb, mb, 1) for mb in todo]) for tr in part)
        return [self.get(mb) for mb in mbs]

    def walk(self, lo: int, hi: int) -> None:
        """Decide every budget from ``lo`` to ``hi``; raises ``SearchLimit`` past ``self.limit`` simulations."""
        while True:
            gaps = self._gaps(lo, hi)
            if not gaps:
                return
            left = self.limit - len(self.trials)
            if left <= 0:
                raise SearchLimit
            pool = self._workers()
            if pool is None:
                a = gaps[0][0]
                self.get(a)
                continue
            # pieces small enough to keep every core busy and the progress moving; the same pieces
            # (and so the same trials) for the same input on the same number of cores
            span = sum(b - a + 1 for a, b in gaps)
            step = max(1, -(-span // (4 * self.jobs)))
            pieces = [(a, min(a + step - 1, b)) for a, b in gaps for a in range(a, b + 1, step)]
            most = max(1, left // len(pieces))
            for part in pool.imap(_walk, [(a, b, most) for a, b in pieces]):
                self._add(part)

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
    max_trials: int | None = None,
    early_stop: bool = True,
) -> BudgetSearch:
    """Search the whole-MiB budgets from ``lowest`` to ``highest`` (those SGLang and plan accept).

    ``layouts(mb)`` is the pools SGLang creates for ``mb``. ``max_trials`` bounds the simulations
    of the safe and scan searches: past it the answer is the candidate so far, ``exact`` False,
    with the budgets checked in ``checked_mb``. ``early_stop`` False replays every trial whole
    (the same answer, at more cost).
    """
    events = as_events(events)  # once: every trial replays the same columns
    no_miss = no_miss_budget(events, layouts, lowest, highest)
    top = min(no_miss, highest)
    search = BudgetSearch(target, basis, method, None, lowest, top_mb=top, no_miss_mb=no_miss)
    with _Evaluator(events, layouts, top, default_jobs() if jobs is None else jobs, progress, no_miss) as ev:

        def meets(mb: int) -> bool:
            return ev.get(mb).rate(basis) <= target

        def done() -> BudgetSearch:
            search.trials = [ev.trials[mb] for mb in sorted(ev.trials)]
            return search

        # the top runs whole: when it fails, its figures are why no budget meets the target
        if ev.get(top, whole=True).rate(basis) > target:
            return done()  # e.g. more than 4096 features in flight: no budget avoids the slot cap
        ev.stop = stop_at(events, target, basis) if early_stop else None
        estimate = _bisect(ev, lowest, top, basis, target)
        if method == "bisect":
            search.smallest_mb = estimate
            return done()
        if max_trials is not None:
            ev.limit = len(ev.trials) + max_trials
        if method == "scan":
            try:
                ev.walk(lowest, estimate)
            except SearchLimit:
                search.smallest_mb, search.exact = estimate, False
                search.checked_mb = (_decided_down(ev, estimate, lowest), estimate)
                return done()
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
            search.smallest_mb, search.exact = safe, False
            search.checked_mb = (safe, _decided_up(ev, safe, basis, target))
            return done()
        search.upper_mb = min(2 * safe, top)
        try:  # and below it: a lower budget may be safe too, or fragile
            lowest_meeting = _lowest_meeting(ev, lowest, safe, basis, target)
            safe = _safe_below(ev, lowest_meeting, safe, top, basis, target)
        except SearchLimit:
            search.smallest_mb, search.exact = safe, False  # safe as stated; a lower one is not ruled out
            search.checked_mb = (_decided_down(ev, safe, lowest), search.upper_mb)
            return done()
        search.smallest_mb = safe
        search.upper_mb = min(2 * safe, top)
        search.fragile_mb = lowest_meeting if lowest_meeting < safe else None
        return done()


def _lowest_meeting(ev: _Evaluator, lowest: int, safe: int, basis: Basis, target: Fraction) -> int:
    """The lowest budget that meets the target (``safe`` does): every budget below it decided, failing.

    One walk over every budget below ``safe``, split across the cores: walking it in growing
    windows instead, to stop at the first budget that meets, costs more trials (each window's
    pieces start trials of their own) and saves only where that budget is far below ``safe``.
    """
    ev.walk(lowest, safe)
    return next(mb for mb in range(lowest, safe + 1) if ev.get(mb).rate(basis) <= target)


def _safe_below(ev: _Evaluator, meeting: int, safe: int, top: int, basis: Basis, target: Fraction) -> int:
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


def _decided_up(ev: _Evaluator, mb: int, basis: Basis, target: Fraction) -> int:
    """The last budget of the run from ``mb`` up that is decided and meets the target."""
    while True:
        tr = ev.known(mb + 1)
        if tr is None or tr.rate(basis) > target:
            return mb
        mb = max(mb + 1, min(tr.same_until_mb, ev.cap))


def _decided_down(ev: _Evaluator, mb: int, lowest: int) -> int:
    """The first budget of the run down from ``mb`` that is decided."""
    while mb > lowest and ev.known(mb - 1) is not None:
        mb -= 1
    return mb


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
