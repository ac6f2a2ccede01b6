"""Runs the search's trials: one at a time, or in parallel, one process per core.

The evaluator remembers every trial and which budgets each decides; what it runs at once and how
it splits a range into pieces depend only on the input and ``jobs``, never on which trial ends first.
"""

from __future__ import annotations

import os
from bisect import bisect_right
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from mmpool_cli.simulate.events import Event, Events
from mmpool_cli.simulate.trials import LayoutFor, StopAt, Trial, trial

Progress = Callable[[int], None]  # called with the number of budgets simulated so far


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


class Evaluator:
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

    def __enter__(self) -> Evaluator:
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
