"""Decides the search's budgets: which trials to run, handed to an executor, and what they taught.

What it runs depends only on the input, never on the executor, the number of cores or which trial
ends first: a range is cut into pieces of at least ``PIECE_MB`` budgets (more where trials so far each
decided many: the pieces follow from the trials, never from the cores), a bisection tries ``BISECT_POINTS``
budgets a round, and the search's limit is counted in replayed events, shared between the pieces
of a round in a fixed way. So every executor, on any number of cores, gives the same trials.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Callable, Iterable, Sequence

from mmpool_cli.pools.executors import Executor, LocalExecutor, Piece, Work
from mmpool_cli.pools.trials import LayoutFor, StopAt, Trial
from mmpool_cli.traces.events import Events

Progress = Callable[[int], None]  # called with the number of budgets simulated so far

PIECE_MB = 16  # the fewest budgets a piece of a walk covers: small enough to spread over many cores
TRIALS_PER_PIECE = 4  # where one trial decides many budgets, a piece covers about this many trials' worth
BISECT_POINTS = 3  # budgets a bisection round simulates at once
UNLIMITED = 1 << 62


class SearchLimit(Exception):
    """More replayed events than the search may spend."""


class Evaluator:
    """Simulates budgets through an executor and remembers what it learnt."""

    def __init__(
        self,
        events: Events,
        layouts: LayoutFor,
        cap: int,
        executor: Executor | None,
        progress: Progress | None,
        alike_from: int = 0,
    ) -> None:
        self.events, self.layouts, self.cap, self.alike = events, layouts, cap, alike_from
        self.stop: StopAt | None = None  # set before the first trial that may stop
        self.limit = UNLIMITED  # replayed events the search may spend in all
        self.spent = 0  # replayed events so far
        self.executor: Executor = LocalExecutor() if executor is None else executor
        self.progress = progress
        self.trials: dict[int, Trial] = {}
        self._starts: list[int] = []  # sorted starts of the trials
        self._work: Work | None = None

    def __enter__(self) -> Evaluator:
        return self

    def __exit__(self, *_: object) -> None:
        self.executor.close()

    def _run(self, pieces: Sequence[Piece]) -> None:
        work = self._work
        if work is None or work.stop is not self.stop:
            work = self._work = Work(self.events, self.layouts, self.cap, self.alike, self.stop)
        for part in self.executor.run(work, pieces):
            self._add(part)

    def _add(self, trials: Iterable[Trial]) -> None:
        for tr in trials:
            if tr.mb not in self.trials:
                self.trials[tr.mb] = tr
                self.spent += tr.events
        self._starts = sorted(self.trials)
        if self.progress is not None:
            self.progress(len(self.trials))

    def seed(self, trials: Iterable[Trial]) -> None:
        """Take trials replayed elsewhere (the curve's, each a whole replay) as if this search had run them."""
        self._add(trials)

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
            self._run([Piece(mb, mb, UNLIMITED, whole)])
            tr = self.trials[mb]
        return tr

    def many(self, mbs: Sequence[int]) -> list[Trial]:
        todo = sorted({mb for mb in mbs if self.known(mb) is None})
        if todo:
            self._run([Piece(mb, mb, UNLIMITED) for mb in todo])
        return [self.get(mb) for mb in mbs]

    def walk(self, lo: int, hi: int) -> None:
        """Decide every budget from ``lo`` to ``hi``; raises ``SearchLimit`` once the limit is spent."""
        n = max(1, len(self.events))
        while True:
            gaps = self.gaps(lo, hi)
            if not gaps:
                return
            left = self.limit - self.spent
            if left <= 0:
                raise SearchLimit
            step = self._piece_mb()
            pieces = [(a, min(a + step - 1, b)) for a, b in gaps for a in range(a, b + 1, step)]
            # as many pieces as the limit has whole replays for, each with an equal share of it
            pieces = pieces[: max(1, min(len(pieces), left // n))]
            share = left // len(pieces)
            self._run([Piece(a, b, share) for a, b in pieces])

    def _piece_mb(self) -> int:
        """The budgets a piece covers: ``PIECE_MB``, or about ``TRIALS_PER_PIECE`` trials' worth where one
        trial has decided more (the median of the budgets each trial so far decides)."""
        widths = sorted(min(t.same_until_mb, self.cap) - t.mb + 1 for t in self.trials.values())
        median = widths[len(widths) // 2] if widths else 1
        return max(PIECE_MB, TRIALS_PER_PIECE * median)

    def gaps(self, lo: int, hi: int) -> list[tuple[int, int]]:
        """The runs of budgets from ``lo`` to ``hi`` that no trial decides yet."""
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

    def undecided(self, lo: int, hi: int) -> int:
        """How many budgets from ``lo`` to ``hi`` no trial decides yet."""
        return sum(b - a + 1 for a, b in self.gaps(lo, hi))
