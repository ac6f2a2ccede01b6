"""The probe's child processes: one fork server that imports torch, children forked from it, one deadline.

Every CUDA context lives in a child; this process only sends requests and reads replies. The
fork server imports torch once (the probe's longest wait), so each child starts in milliseconds.
``--timeout`` is a ``Deadline`` for the whole probe: every wait here (the fork server's start
included) ends when it runs out, and the children are then killed and reaped, never leaked.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import signal
import tempfile
import threading
import time
from functools import cache
from multiprocessing import forkserver
from typing import Any

# Modules the fork server imports before it forks anyone: torch (seconds), the child's own code,
# and what the children import later (sharing a pool, the VMM facts), so no child pays for it.
PRELOAD = ["torch", "torch.multiprocessing.reductions", "cuda.bindings.driver", "mmpool_cli.probe.worker"]
# After the deadline, the most the children get to exit and the GPU to be seen released.
RELEASE_GRACE_S = 5.0
EXIT_WAIT_S = 10.0


class Deadline:
    """The moment the whole probe must end (``--timeout`` seconds after it started)."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.end = time.monotonic() + seconds

    def left(self) -> float:
        """Seconds left, never negative."""
        return max(0.0, self.end - time.monotonic())

    @property
    def expired(self) -> bool:
        return time.monotonic() >= self.end


class ChildFailed(Exception):
    """A child process answered with an error, died, or did not answer before the deadline."""

    def __init__(self, name: str, message: str, kind: str) -> None:
        super().__init__(f"{name}: {message}")
        self.kind = kind

    @property
    def code(self) -> str:
        """The finding code for this failure."""
        return {"oom": "alloc-oom", "timeout": "child-timeout", "died": "child-died"}.get(self.kind, "child-error")


@cache
def server_started_at() -> float:
    """Start the fork server that preloads torch, without waiting for it; once per process.

    Returns the wall-clock time it was asked for, so that the children can say how long the import took.
    """
    multiprocessing.get_context("forkserver").set_forkserver_preload(PRELOAD)
    threading.Thread(target=forkserver.ensure_running, daemon=True).start()
    return time.time()


def stop_fork_server() -> None:
    """Kill the fork server (a later probe starts a new one): a start blocked on it then fails at once."""
    server = forkserver._forkserver  # noqa: SLF001 - multiprocessing has no public handle on its server
    with server._lock:  # type: ignore[attr-defined]  # noqa: SLF001
        pid = server._forkserver_pid  # type: ignore[attr-defined]  # noqa: SLF001
        if pid is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)  # it may be deep in torch's import: asking would wait for that
        server._stop_unlocked()  # type: ignore[attr-defined]  # noqa: SLF001 - reaps it and forgets its address
    server_started_at.cache_clear()


class Child:
    """One probe child process with its pipe and log file; started by ``Children.start``."""

    def __init__(self, ctx: Any, name: str, device: int, alloc_conf: str | None, logdir: str, deadline: Deadline):
        from mmpool_cli.probe.worker import serve

        self.name = name
        self.deadline = deadline
        self.log_path = os.path.join(logdir, f"{name}.log")
        self.conn, self._child_conn = ctx.Pipe()
        self.process = ctx.Process(
            target=serve, args=(self._child_conn, device, alloc_conf, self.log_path), daemon=True
        )
        self.pid: int | None = None
        self.hello: dict[str, Any] = {}

    def launch(self) -> None:
        """Fork the child, waiting for the fork server at most until the deadline."""
        done = threading.Event()
        errors: list[BaseException] = []

        def start() -> None:
            try:
                self.process.start()
            except BaseException as e:  # noqa: BLE001 - handed to the waiting thread
                errors.append(e)
            finally:
                done.set()

        threading.Thread(target=start, daemon=True).start()
        if not done.wait(self.deadline.left()):
            stop_fork_server()  # the blocked start then fails, and no child is forked behind our back
            done.wait(EXIT_WAIT_S)
            raise ChildFailed(self.name, self._late("the fork server was still importing torch"), "timeout")
        self._child_conn.close()
        if errors:
            raise ChildFailed(self.name, f"could not start: {errors[0]}", "died")
        self.pid = self.process.pid

    def _late(self, what: str) -> str:
        return f"the probe ran out of its --timeout of {self.deadline.seconds:g} s ({what})"

    def send(self, op: str, **args: Any) -> None:
        try:
            self.conn.send({"op": op, **args})
        except (BrokenPipeError, OSError) as e:
            raise self._died(f"cannot send '{op}': {e}") from None

    def receive(self) -> dict[str, Any]:
        """The child's reply to the last request, waiting at most until the deadline."""
        try:
            if not self.conn.poll(self.deadline.left()):
                raise ChildFailed(self.name, self._late("it had not answered"), "timeout")
            reply = self.conn.recv()
        except (EOFError, OSError):
            raise self._died("stopped answering") from None
        if "error" in reply:
            raise ChildFailed(self.name, reply["error"], reply.get("kind", "error"))
        answer: dict[str, Any] = reply
        return answer

    def ask(self, op: str, **args: Any) -> dict[str, Any]:
        self.send(op, **args)
        return self.receive()

    def _died(self, what: str) -> ChildFailed:
        self.process.join(1.0)
        code = self.process.exitcode
        how = f"exit code {code}" if code is not None and code >= 0 else f"killed by signal {-(code or 0)}"
        return ChildFailed(self.name, f"{what} ({how}){self.log_tail()}", "died")

    def log_tail(self) -> str:
        try:
            with open(self.log_path, encoding="utf-8", errors="replace") as f:
                lines = [line.strip() for line in f.read().splitlines() if line.strip()]
        except OSError:
            return ""
        return f"; its last log line: {lines[-1]}" if lines else ""

    def ask_exit(self) -> None:
        """Ask the child to exit (it tears its CUDA context down on the way out)."""
        if self.pid is not None and self.process.is_alive():
            with contextlib.suppress(BrokenPipeError, OSError):
                self.conn.send({"op": "exit"})

    def reap(self, until: float) -> None:
        """Wait for the child until the monotonic time ``until``, then kill it; always reaped."""
        if self.pid is not None:
            self.process.join(max(0.0, until - time.monotonic()))
            if self.process.is_alive():
                self.process.kill()
                self.process.join(EXIT_WAIT_S)
        self.conn.close()


class Children:
    """Every child of a probe run, stopped together however the run ends."""

    def __init__(self, deadline: Deadline) -> None:
        self.deadline = deadline
        self.ctx = multiprocessing.get_context("forkserver")
        self.server_started_at = server_started_at()
        self.logdir = tempfile.mkdtemp(prefix="mmpool-probe-")
        self.all: list[Child] = []

    def start(self, names: list[str], device: int, alloc_conf: str | None) -> list[Child]:
        """Fork one child per name and wait for each one's hello (torch imported)."""
        started = [Child(self.ctx, n, device, alloc_conf, self.logdir, self.deadline) for n in names]
        self.all.extend(started)
        for child in started:
            child.launch()
        for child in started:
            child.hello = child.receive()
        return started

    def ask_all(self, children: list[Child], op: str, **args: Any) -> list[dict[str, Any]]:
        """Send one request to every child, then collect the replies (the children work in parallel)."""
        for child in children:
            child.send(op, **args)
        return [child.receive() for child in children]

    def stop(self, children: list[Child] | None = None) -> None:
        """Stop children together: all are asked to exit first, so their teardowns overlap.

        Past the deadline they get ``RELEASE_GRACE_S`` before they are killed.
        """
        chosen = [c for c in (children if children is not None else self.all) if not c.conn.closed]
        for child in chosen:
            child.ask_exit()
        until = time.monotonic() + min(EXIT_WAIT_S, max(self.deadline.left(), RELEASE_GRACE_S))
        for child in chosen:
            child.reap(until)

    def close(self) -> None:
        self.stop()
        for name in os.listdir(self.logdir):
            os.unlink(os.path.join(self.logdir, name))
        os.rmdir(self.logdir)
