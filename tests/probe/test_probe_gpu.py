"""The probe on a real NVIDIA GPU. Skipped without ``--run-gpu``; ``benchmarks/gpu_run.sh`` runs them.

Every test that makes something fail checks afterwards that the GPU's free memory is back
where it started.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import pytest

from mmpool_cli.core.units import MiB
from mmpool_cli.engines.sglang.models import Budget, PlanRequest
from mmpool_cli.probe import devices as dv
from mmpool_cli.probe.runner import BASELINE_TOLERANCE, ProbeRequest, run_probe

pytestmark = pytest.mark.gpu


def request(size: int = 1024 * MiB, workers: int = 1, tp: int = 1, **kwargs) -> ProbeRequest:
    plan = PlanRequest(budget=Budget(bytes=size, source="flag"), workers=workers, tp_size=tp)
    return ProbeRequest(plan=plan, cuda_visible_devices=os.environ.get("CUDA_VISIBLE_DEVICES"), **kwargs)


def codes(report) -> set[str]:
    return {f.code for f in report.findings}


def base_free() -> int:
    devices = dv.read_nvml()
    return devices[dv.visible_order(os.environ.get("CUDA_VISIBLE_DEVICES"), devices)[0]].free


def assert_back_at(baseline: int) -> None:
    assert abs(base_free() - baseline) <= BASELINE_TOLERANCE


def test_sglang_defaults_pass() -> None:
    report = run_probe(request())
    assert report.status == "ok", [f.message for f in report.findings]
    stages = {s.name: s for s in report.stages}
    assert stages["allocate"].figures["reserved_bytes_per_worker"] == [1024 * MiB]
    assert {"allocator-as-predicted", "ipc-ok"} <= codes(report)
    assert "memory-not-released" not in codes(report)


def test_four_workers_tp8_pass_and_agree_with_the_plan() -> None:
    report = run_probe(request(workers=4, tp=8))
    assert report.status == "ok", [f.message for f in report.findings]
    allocate = next(s for s in report.stages if s.name == "allocate")
    assert allocate.figures["reserved_bytes_per_worker"] == [256 * MiB] * 4
    predicted = allocate.figures["context_bytes_predicted"]
    assert abs(allocate.figures["context_bytes_per_process"] - predicted) <= predicted // 10
    ipc = next(s for s in report.stages if s.name == "ipc")
    assert ipc.figures["default"]["read_ok"] and ipc.figures["expandable_segments"]["read_ok"]


def test_odd_split_reserves_what_the_allocator_model_says() -> None:
    report = run_probe(request(workers=3, ipc=False))
    allocate = next(s for s in report.stages if s.name == "allocate")
    assert allocate.figures["reserved_bytes_per_worker"] == [358_612_992] * 3
    assert "allocator-as-predicted" in codes(report)


def test_out_of_memory_is_a_finding_and_the_gpu_is_left_as_it_was() -> None:
    baseline = base_free()
    report = run_probe(request(size=(baseline + 8 * 1024 * MiB) // MiB * MiB, ipc=False, allocate_anyway=True))
    assert report.status == "fail"
    assert "does-not-fit" in codes(report)
    assert "alloc-oom" in codes(report)
    assert "memory-not-released" not in codes(report)
    assert_back_at(baseline)


def test_child_killed_mid_run_is_a_finding_and_the_gpu_is_left_as_it_was() -> None:
    baseline = base_free()

    def kill_one(pids: list[int]) -> None:
        os.kill(pids[1], signal.SIGKILL)

    report = run_probe(request(workers=4, ipc=False, hooks={"after_alloc": kill_one}))
    assert report.status == "fail"
    died = [f for f in report.findings if f.code == "child-died"]
    assert died and "killed by signal 9" in died[0].message
    assert "memory-not-released" not in codes(report)
    assert_back_at(baseline)


def test_timeout_bounds_the_whole_probe_and_the_gpu_is_left_as_it_was() -> None:
    import time

    from mmpool_cli.probe.processes import RELEASE_GRACE_S

    baseline = base_free()
    started = time.monotonic()
    report = run_probe(request(workers=4, tp=8, timeout=0.5))
    elapsed = time.monotonic() - started
    assert report.status == "fail"
    assert "child-timeout" in codes(report), [f.message for f in report.findings]
    assert elapsed < 0.5 + RELEASE_GRACE_S + 1.0, elapsed
    assert "memory-not-released" not in codes(report)
    assert_back_at(baseline)


def test_nvml_read_creates_no_cuda_context() -> None:
    import pynvml

    dv.read_nvml()
    pynvml.nvmlInit()
    try:
        handle = pynvml.nvmlDeviceGetHandleByIndex(0)
        pids = {p.pid for p in pynvml.nvmlDeviceGetComputeRunningProcesses(handle)}
    finally:
        pynvml.nvmlShutdown()
    assert os.getpid() not in pids
    assert "torch" not in sys.modules or not __import__("torch").cuda.is_initialized()


def test_cli_json_exit_0() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "mmpool_cli", "probe", "--format", "json"], capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["status"] == "ok"
