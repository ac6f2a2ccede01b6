"""The probe's process plumbing without a GPU: the deadline bounds every wait, the fork server's start included."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from mmpool_cli.engines.sglang.models import Budget, PlanRequest
from mmpool_cli.probe import devices as dv
from mmpool_cli.probe import lifeline, processes, runner
from mmpool_cli.probe.processes import ChildFailed, Deadline

ROOT = Path(__file__).resolve().parents[2]
GPU = dv.NvmlDevice(index=0, uuid="GPU-00aa", name="NVIDIA H200", total=150_754_820_096, free=150_000_000_000, used=0)


def test_deadline_counts_down_and_never_goes_negative() -> None:
    deadline = Deadline(0.05)
    assert 0 < deadline.left() <= 0.05
    assert not deadline.expired
    time.sleep(0.06)
    assert deadline.left() == 0.0
    assert deadline.expired


def test_child_failure_codes() -> None:
    assert ChildFailed("worker0", "x", "timeout").code == "child-timeout"
    assert ChildFailed("worker0", "x", "oom").code == "alloc-oom"
    assert ChildFailed("worker0", "x", "died").code == "child-died"
    assert ChildFailed("worker0", "x", "error").code == "child-error"
    assert str(ChildFailed("worker0", "no answer", "timeout")) == "worker0: no answer"


def test_timeout_bounds_the_whole_probe_even_while_the_fork_server_imports_torch(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    pytest.importorskip("torch")
    monkeypatch.setattr(runner.dv, "read_nvml", lambda: [GPU])
    monkeypatch.setattr(runner.dv, "free_bytes", lambda _index: GPU.free)
    processes.stop_fork_server()  # a fresh fork server: its import of torch takes seconds
    request = runner.ProbeRequest(plan=PlanRequest(budget=Budget(bytes=2**30, source="flag")), timeout=0.5)
    started = time.monotonic()
    report = runner.run_probe(request)
    elapsed = time.monotonic() - started
    timeouts = [f for f in report.findings if f.code == "child-timeout"]
    assert report.status == "fail"
    assert timeouts, [(f.code, f.message) for f in report.findings]
    assert "--timeout of 0.5 s" in timeouts[0].message
    assert elapsed < 2.5, elapsed


def test_reading_a_childs_replies_never_imports_torch_here() -> None:
    # torch.__version__ is a TorchVersion: a reply that held one made the parent import torch (3 s)
    pytest.importorskip("torch")
    script = (
        "import sys\n"
        "from mmpool_cli.probe import processes\n"
        "def main():\n"
        "    children = processes.Children(processes.Deadline(120))\n"
        "    try:\n"
        "        hello = children.start(['worker0'], 0, None)[0].hello\n"
        "    finally:\n"
        "        children.close()\n"
        "    print(type(hello['torch']).__name__, 'torch' in sys.modules)\n"
        "if __name__ == '__main__':\n"
        "    main()\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=False, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["str", "False"]


def _gone(pid: int, within: float) -> bool:
    """Whether ``pid`` has exited (a zombie nobody reaped counts) within ``within`` seconds."""
    end = time.monotonic() + within
    while True:
        try:
            with open(f"/proc/{pid}/stat", encoding="ascii") as f:
                state = f.read().rsplit(")", 1)[1].split()[0]
        except (FileNotFoundError, ProcessLookupError):
            return True
        if state in ("Z", "X"):
            return True
        if time.monotonic() >= end:
            return False
        time.sleep(0.05)


def _kill(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)


def _mmpool_stand_in(tmp_path: Path, body: str = "", preload: str = "torch") -> subprocess.Popen[str]:
    """A process that starts the probe's fork server as ``mmpool probe`` does, then runs ``body``."""
    script = (
        "import os, sys, time\n"
        "from multiprocessing import forkserver\n"
        "from mmpool_cli.probe import processes\n"
        "def main():\n"
        f"    processes.PRELOAD[processes.PRELOAD.index('torch')] = {preload!r}\n"
        "    processes.server_started_at()\n"
        "    while forkserver._forkserver._forkserver_pid is None:\n"
        "        time.sleep(0.01)\n"
        "    print(forkserver._forkserver._forkserver_pid, flush=True)\n"
        f"    print(os.environ.get({lifeline.PARENT_ENV!r}), flush=True)\n"
        f"{textwrap.indent(body, '    ')}\n"
        "    time.sleep(120)\n"
        "if __name__ == '__main__':\n"
        "    main()\n"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(tmp_path)])}
    return subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True, env=env, cwd=tmp_path)


def test_the_fork_server_dies_with_mmpool_even_while_it_imports_torch(tmp_path: Path) -> None:
    # torch's import takes seconds; a stand-in that never ends stands for it, and says when it started
    marker = tmp_path / "importing"
    (tmp_path / "slow_torch.py").write_text(f"import time\nopen({str(marker)!r}, 'w').close()\ntime.sleep(120)\n")
    mmpool = _mmpool_stand_in(tmp_path, preload="slow_torch")
    server = 0
    try:
        assert mmpool.stdout is not None
        server = int(mmpool.stdout.readline())
        end = time.monotonic() + 60
        while not marker.exists():
            assert time.monotonic() < end, "the fork server never started its imports"
            time.sleep(0.02)
        # the variable that binds the server is the server's alone: left in mmpool's environment, a
        # later subprocess of mmpool would take it for itself
        assert mmpool.stdout.readline().strip() == "None"
        mmpool.kill()  # as SIGKILL of mmpool probe, while the fork server is inside the import
        mmpool.wait()
        assert _gone(server, 3.0), "the fork server outlived mmpool"
    finally:
        mmpool.kill()
        mmpool.communicate()
        if server:
            _kill(server)


def test_a_child_dies_with_the_fork_server_and_everything_with_mmpool(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    body = (
        "children = processes.Children(processes.Deadline(120))\n"
        "print(children.start(['worker0'], 0, None)[0].pid, flush=True)\n"
    )
    mmpool = _mmpool_stand_in(tmp_path, body)
    server = child = 0
    try:
        assert mmpool.stdout is not None
        server = int(mmpool.stdout.readline())
        assert mmpool.stdout.readline().strip() == "None"
        child = int(mmpool.stdout.readline())
        assert not _gone(child, 0.2)
        _kill(server)
        assert _gone(child, 3.0), "a probe child outlived the fork server it was forked from"
        assert mmpool.poll() is None
    finally:
        mmpool.kill()
        mmpool.communicate()
        for pid in (server, child):
            if pid:
                _kill(pid)
