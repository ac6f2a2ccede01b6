"""The probe's process plumbing without a GPU: the deadline bounds every wait, the fork server's start included."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from mmpool_cli.engines.sglang.models import Budget, PlanRequest
from mmpool_cli.probe import devices as dv
from mmpool_cli.probe import processes, runner
from mmpool_cli.probe.processes import ChildFailed, Deadline

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
