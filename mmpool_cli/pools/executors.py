"""Where the budget search's trials run: in this process and its forked workers, or on a Ray cluster.

An executor runs pieces of work (``Piece``: walk the budgets from ``lo`` to ``hi``) over one
``Work`` (the trace and the pools), and yields each piece's trials in the order the pieces were
given, whichever ends first; a piece's trials depend only on the piece and the work, so every
executor gives the same trials. ``map`` runs any picklable function over items the same way (``trace``
reads a fleet's files with it). Ray is imported only by ``RayExecutor``, and only when it starts.
"""

from __future__ import annotations

import contextlib
import os
import re
import socket
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

from mmpool_cli.core.workers import default_jobs, worker_start
from mmpool_cli.errors import EXIT_UNAVAILABLE, MmpoolError
from mmpool_cli.pools.trials import LayoutFor, StopAt, Trial, trial
from mmpool_cli.traces.events import Events

POLL_S = 1.0  # how often a search waiting on Ray checks that the cluster's head still answers
HEAD_GONE_S = 10.0  # a head that does not answer this long is gone (Ray's own patience is a minute)
A = TypeVar("A")
R = TypeVar("R")
RAY_EXTRA = "--executor ray needs Ray: pip install 'mmpool[ray]' (or, from an mmpool checkout, pip install '.[ray]')"


class ClusterError(MmpoolError):
    """The Ray cluster could not be reached, or went away before the search was done (exit 3)."""

    exit_code = EXIT_UNAVAILABLE


@dataclass(frozen=True)
class Work:
    """What every trial of one search replays: the trace, the pools of each budget, and when to stop."""

    events: Events
    layouts: LayoutFor
    cap: int
    alike: int
    stop: StopAt | None


@dataclass(frozen=True)
class Piece:
    """Decide the budgets from ``lo`` to ``hi``: simulate one, skip those it decides alike, repeat while a
    next trial fits in ``budget`` replayed events (the first always runs); ``whole``: never stop early."""

    lo: int
    hi: int
    budget: int
    whole: bool = False


def walk(work: Work, piece: Piece) -> list[Trial]:
    """The trials of one piece: a function of the piece and the work alone."""
    out: list[Trial] = []
    n = len(work.events)
    spent = 0
    mb = piece.lo
    stop = None if piece.whole else work.stop
    while mb <= piece.hi and (not out or spent + n <= piece.budget):
        tr = trial(work.events, mb, work.layouts, work.cap, work.alike, stop)
        out.append(tr)
        spent += tr.events
        mb = tr.same_until_mb + 1
    return out


class Executor(Protocol):
    """Runs pieces over one work; ``slots`` is how many it runs at once (for sizing, never for deciding)."""

    slots: int

    def run(self, work: Work, pieces: Sequence[Piece]) -> Iterator[list[Trial]]: ...

    def map(self, fn: Callable[[A], R], items: Sequence[A]) -> Iterator[R]:
        """``fn`` over ``items``, the results in ``items``' order, whichever ends first."""
        ...

    def close(self) -> None: ...


# The forked workers' copy of the work, set before they fork.
_SHARED: dict[str, Work] = {}


def _walk_shared(piece: Piece) -> list[Trial]:
    return walk(_SHARED["work"], piece)


class LocalExecutor:
    """This process, and one forked worker per core for more than one piece at a time."""

    def __init__(self, jobs: int | None = None) -> None:
        self.slots = max(1, default_jobs() if jobs is None else jobs)
        self._pool: Any = None
        self._work: Work | None = None

    def run(self, work: Work, pieces: Sequence[Piece]) -> Iterator[list[Trial]]:
        pool = self._workers(work) if len(pieces) > 1 else None
        if pool is None:
            return (walk(work, p) for p in pieces)
        return iter(pool.imap(_walk_shared, pieces))

    def map(self, fn: Callable[[A], R], items: Sequence[A]) -> Iterator[R]:
        """One item after another, in this process: nothing to fork for what reads files."""
        return (fn(item) for item in items)

    def _workers(self, work: Work) -> Any:
        import multiprocessing  # here: a plain simulate never needs it, and it costs start-up time

        if self._pool is not None and self._work is not work:
            self.close()
        if self._pool is None and self.slots > 1 and "fork" in multiprocessing.get_all_start_methods():
            _SHARED["work"] = self._work = work
            self._pool = multiprocessing.get_context("fork").Pool(self.slots, initializer=worker_start)
        return self._pool

    def close(self) -> None:
        if self._pool is not None:
            self._pool.terminate()
            self._pool.join()
            self._pool = None


# In a Ray worker: the works it has fetched from the object store, by reference (one search's at a time).
_FETCHED: dict[Any, Work] = {}


def _ray_walk(refs: list[Any], piece: Piece) -> list[Trial]:
    """A piece as a Ray task: the work fetched once per worker, not once per task."""
    import ray

    ref = refs[0]  # in a list, so that Ray hands the reference over instead of the object
    work = _FETCHED.get(ref)
    if work is None:
        _FETCHED.clear()
        work = _FETCHED[ref] = ray.get(ref)
    return walk(work, piece)


def _ray_apply(fn: Callable[[A], R], item: A, cwd: str) -> R:
    """One item as a Ray task, in the caller's working directory where the node has it (its relative paths)."""
    if cwd and os.path.isdir(cwd):
        os.chdir(cwd)
    return fn(item)


class RayExecutor:
    """Ray tasks on the cluster at ``address`` (``RAY_ADDRESS`` when None; a local Ray when neither):
    the work put once into the object store, each piece a task, retried by Ray if its worker dies.
    ``job`` names what it runs in its errors (``the search``), ``unfinished`` what a lost cluster leaves."""

    def __init__(
        self,
        address: str | None = None,
        retries: int = 3,
        job: str = "the search",
        unfinished: str = "no answer was reached",
    ) -> None:
        try:
            import ray
        except ImportError:
            raise MmpoolError(RAY_EXTRA) from None
        self._ray = ray
        self.address = address or os.environ.get("RAY_ADDRESS") or None
        self.retries = retries
        self.job, self.unfinished = job, unfinished
        self._apply: Any = None
        self._ref: Any = None
        self._work: Work | None = None
        self._task: Any = None
        self._started = False
        self._gone = False
        self._gcs = ("127.0.0.1", 0)
        self._quiet: contextlib.ExitStack | None = None
        self.slots = 1

    def _start(self) -> None:
        ray = self._ray
        where = self.address or "a local Ray"
        silent = _silent_head(self.address)
        if silent is not None:  # Ray itself would try for minutes
            raise ClusterError(f"--executor ray: cannot connect to {where} ({silent})")
        try:
            if not ray.is_initialized():
                # Ray prints its own notes (a worker that died, say) on stdout: they go to stderr,
                # never into the report, until Ray is shut down
                self._quiet = contextlib.ExitStack()
                self._quiet.enter_context(contextlib.redirect_stdout(sys.stderr))
                options: dict[str, Any] = {"log_to_driver": False, "logging_level": "ERROR"}
                if self.address is None:
                    options["include_dashboard"] = False
                # no address: a Ray of its own, never the cluster /tmp/ray/ray_current_cluster names
                # (Ray's own choice for None), which a killed head leaves behind and Ray then waits on
                ray.init(address=self.address or "local", **options)
                self._started = True
            self.slots = max(1, int(ray.cluster_resources().get("CPU", 1)))
            host, _, port = ray.get_runtime_context().gcs_address.rpartition(":")
            self._gcs = (host, int(port))
        except (ConnectionError, RuntimeError, ValueError, ray.exceptions.RayError) as e:
            if _refused_token(e):
                raise ClusterError(
                    f"--executor ray: {where} refuses this client: its head uses Ray's token authentication "
                    "and this client gave no token or another (InvalidAuthToken); set RAY_AUTH_TOKEN to the "
                    "cluster's token ('ray get-auth-token' on the head prints it), or put it in ~/.ray/auth_token"
                ) from None
            raise ClusterError(f"--executor ray: cannot connect to {where} ({_first_line(e)})") from None
        remote = ray.remote(num_cpus=1, max_retries=self.retries, retry_exceptions=False)
        self._task, self._apply = remote(_ray_walk), remote(_ray_apply)

    def run(self, work: Work, pieces: Sequence[Piece]) -> Iterator[list[Trial]]:
        if self._task is None:
            self._start()
        ray = self._ray
        try:
            if self._work is not work:
                self._ref, self._work = ray.put(work), work
            refs = [self._task.remote([self._ref], p) for p in pieces]
        except ray.exceptions.RayError as e:
            raise self._lost(e) from None
        return self._results(refs)

    def map(self, fn: Callable[[A], R], items: Sequence[A]) -> Iterator[R]:
        """Each item a task; ``fn`` and the items travel by value (picklable), the results come in order."""
        if self._apply is None:
            self._start()
        try:
            cwd = _cwd()
            refs = [self._apply.remote(fn, item, cwd) for item in items]
        except self._ray.exceptions.RayError as e:
            raise self._lost(e) from None
        return self._results(refs)

    def _results(self, refs: list[Any]) -> Iterator[Any]:
        ray = self._ray
        for ref in refs:
            gone_since: float | None = None
            while True:
                try:
                    ready, _ = ray.wait([ref], timeout=POLL_S)
                    if ready:
                        result = ray.get(ref)
                        break
                except ray.exceptions.RayTaskError as e:
                    if isinstance(e.cause, Exception):  # the task's own exception, a fault of mmpool's: as here
                        raise e.cause from None
                    raise self._lost(e) from None
                except ray.exceptions.RayError as e:
                    raise self._lost(e) from None
                # Ray itself waits a minute for a head that is gone, then ends this process without a
                # word: the head's port is watched here instead
                if self._head_answers():
                    gone_since = None
                    continue
                now = time.monotonic()
                gone_since = now if gone_since is None else gone_since
                if now - gone_since >= HEAD_GONE_S:
                    self._gone = True
                    raise self._lost(ConnectionError(f"its head at {self._gcs[0]}:{self._gcs[1]} stopped answering"))
            yield result

    def _head_answers(self) -> bool:
        try:
            with socket.create_connection(self._gcs, timeout=POLL_S):
                return True
        except OSError:
            return False

    def _lost(self, e: BaseException) -> ClusterError:
        where = self.address or "the local Ray"
        return ClusterError(
            f"--executor ray: the cluster at {where} failed {self.job} ({_first_line(e)}); "
            f"{self.unfinished}: run it again when the cluster is back"
        )

    def close(self) -> None:
        if self._started and not self._gone:  # a shutdown would wait for the head that went away
            self._ray.shutdown()
        self._started = False
        if self._quiet is not None:
            self._quiet.close()
            self._quiet = None


def _silent_head(address: str | None) -> str | None:
    """Why nothing answers at a ``HOST:PORT`` (or ``ray://HOST:PORT``) address; None when it answers or
    the address is of another form (``auto``, ``local``: Ray's to find)."""
    found = re.fullmatch(r"(?:ray://)?\[?([^\[\]/]+?)\]?:(\d{1,5})", address or "")
    if found is None:
        return None
    host, port = found.group(1), int(found.group(2))
    try:
        with socket.create_connection((host, port), timeout=HEAD_GONE_S):
            return None
    except OSError as e:
        return f"nothing answers at {host}:{port}: {e.strerror or type(e).__name__}"


def _refused_token(e: BaseException) -> bool:
    """Whether Ray failed to connect because the head refused the client's token: Ray raises only
    "Failed to connect", with the AuthenticationError (InvalidAuthToken) as text in its cause."""
    seen: set[int] = set()
    at: BaseException | None = e
    while at is not None and id(at) not in seen:
        seen.add(id(at))
        if type(at).__name__ == "AuthenticationError" or "InvalidAuthToken" in str(at):
            return True
        at = at.__cause__ or at.__context__
    return False


def _cwd() -> str:
    try:
        return os.getcwd()
    except OSError:  # removed while mmpool ran: absolute paths still read
        return ""


def _first_line(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return text[0][:200] if text else type(e).__name__


def executor_for(name: str, *, jobs: int | None = None, address: str | None = None) -> Executor:
    """The executor ``--executor name`` names: ``local`` or ``ray``."""
    if name == "ray":
        return RayExecutor(address)
    return LocalExecutor(jobs)
