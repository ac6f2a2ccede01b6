"""The probe's GPU-free parts: device mapping, the can't-run-here paths, the report and its rendering."""

from __future__ import annotations

import importlib.util
import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from rich.console import Console

from mmpool_cli.core import origin
from mmpool_cli.core.findings import Severity
from mmpool_cli.engines.sglang.models import Budget, PlanRequest
from mmpool_cli.engines.sglang.plan import make_plan
from mmpool_cli.probe import devices as dv
from mmpool_cli.probe.probe_report import GpuInfo, ProbeReport, Stage
from mmpool_cli.render.human import probe_human

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
DEVICES = [
    dv.NvmlDevice(
        index=i, uuid=f"GPU-{i}{i}aa-0000", name="NVIDIA H200", total=150_754_820_096, free=150_000_000_000, used=0
    )
    for i in range(4)
]


@pytest.mark.parametrize(
    ("visible", "expected"),
    [
        (None, [0, 1, 2, 3]),
        ("", []),
        ("2,0", [2, 0]),
        (" 3 , 1 ", [3, 1]),
        ("1,7,2", [1]),  # CUDA stops at the first entry that names no device
        ("1,1", [1]),
        ("GPU-22", [2]),
        ("GPU-33aa-0000,0", [3, 0]),
        ("GPU-", []),
        ("-1", []),
        ("0x1", []),
    ],
)
def test_visible_order_follows_cuda(visible: str | None, expected: list[int]) -> None:
    assert dv.visible_order(visible, DEVICES) == expected


def test_gpu_infos_number_visible_devices() -> None:
    infos = dv.gpu_infos(DEVICES, [2, 0])
    assert [(g.nvml_index, g.cuda_index) for g in infos] == [(0, 1), (1, None), (2, 0), (3, None)]


def test_missing_nvml_says_how_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", None)
    with pytest.raises(dv.ProbeUnavailable) as info:
        dv.read_nvml()
    assert info.value.exit_code == 3
    assert str(info.value) == f"nvidia-ml-py is not installed: {origin.probe_install_hint()}"


def test_probe_without_nvml_exits_3(run_line, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", None)
    result = run_line(["mmpool", "probe", "--format", "json"])
    assert result.exit_code == 3
    data = json.loads(result.stdout)  # one JSON document for every exit status
    assert data["status"] == "unavailable"
    assert [f["code"] for f in data["findings"]] == ["probe-unavailable"]
    assert origin.probe_install_hint() in data["findings"][0]["message"]
    assert data["plan"]["per_worker_bytes"] == 2**30
    assert data["stages"] == []
    assert origin.probe_install_hint() in result.stderr
    human = run_line(["mmpool", "probe"])
    assert human.exit_code == 3
    assert human.stdout == ""


def test_probe_without_torch_exits_3(run_line, monkeypatch: pytest.MonkeyPatch) -> None:
    from mmpool_cli.probe import runner

    monkeypatch.setattr(runner.dv, "read_nvml", lambda: DEVICES)
    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(
        runner.importlib.util, "find_spec", lambda name, *a: None if name == "torch" else real_find_spec(name, *a)
    )
    result = run_line(["mmpool", "probe"])
    assert result.exit_code == 3
    assert f"torch is not installed: {origin.probe_install_hint()}" in result.stderr


def _nvml_works() -> bool:
    try:
        dv.read_nvml()
    except dv.ProbeUnavailable:
        return False
    return True


@pytest.mark.skipif(_nvml_works(), reason="a GPU is visible here: the GPU tests cover this machine")
def test_real_probe_on_a_machine_without_gpu_exits_3_with_a_hint() -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SGLANG_", "SGL_"))}
    for fmt in ("human", "json"):
        result = subprocess.run(
            [sys.executable, "-m", "mmpool_cli", "probe", "--format", fmt],
            capture_output=True,
            text=True,
            env=env,
            check=False,
        )
        assert result.returncode == 3, result.stderr
        if fmt == "json":
            assert json.loads(result.stdout)["status"] == "unavailable"
        else:
            assert result.stdout == ""
        assert "Traceback" not in result.stderr
        assert result.stderr.startswith("mmpool: error: ")
        assert origin.probe_install_hint() in result.stderr or "NVML cannot start" in result.stderr


def test_bad_mem_fraction_is_a_usage_error(run_line) -> None:
    # a fraction of the GPU SGLang may take: a number in (0, 1]; anything else says so and how to fix it
    expected = {
        "1.5": "1.5 is not between 0 and 1",
        "abc": "'abc' is not a number",
        "0": "0 is not between 0 and 1",
        "1/0": "'1/0' is not a number",
    }
    for value, why in expected.items():
        result = run_line(["mmpool", "probe", "--mem-fraction-static", value])
        assert (result.exit_code, result.stdout) == (2, ""), value
        assert result.stderr == f"mmpool: error: --mem-fraction-static: {why}; use e.g. 0.85\n"


def _report(status: str) -> ProbeReport:
    plan = make_plan(PlanRequest(budget=Budget(bytes=2**30, source="default"), workers=4, tp_size=8))
    gpu = GpuInfo(
        cuda_index=0,
        nvml_index=0,
        name="NVIDIA H200",
        uuid="GPU-1",
        total_bytes=150_754_820_096,
        free_bytes=150_109_880_320,
        used_bytes=0,
    )
    stage = Stage("allocate", "Allocate the pools as SGLang does", status="pass", seconds=1.5)
    stage.figures.update(pool_bytes=268_435_456, reserved_bytes_per_worker=[268_435_456] * 4, verify_to_copy=0.79)
    if status == "fail":
        stage.add(Severity.error, "child-died", "worker1: stopped answering (killed by signal 9)")
    return ProbeReport(plan=plan, gpus=[gpu], base_gpu=gpu, stages=[stage], seconds=3.2)


def test_report_status_and_json() -> None:
    ok, failed = _report("pass"), _report("fail")
    assert ok.status == "ok"
    assert failed.status == "fail"
    data = json.loads(json.dumps(failed.to_data()))
    assert data["schema_version"] == 1
    assert data["status"] == "fail"
    assert data["stages"][0]["findings"][0]["code"] == "child-died"
    assert data["plan"]["per_worker_bytes"] == 268_435_456


def test_probe_human_rendering() -> None:
    console = Console(file=io.StringIO(), width=120, color_system=None, legacy_windows=False)
    console.print(probe_human(_report("fail")))
    text = console.file.getvalue()
    assert "mmpool probe: FAIL" in text
    assert "0 (base)" in text
    assert "268,435,456 B (256 MiB)" in text
    assert "child-died" in text


def test_probe_config_with_errors_reports_them_and_exits_1(run_line) -> None:
    path = str(EXAMPLES / "invalid-mmpool.yaml")
    result = run_line(["mmpool", "probe", "--config", path])
    assert result.exit_code == 1
    assert "config-unknown-key" in result.stdout
    assert f"{path}:4:3" in result.stdout
    assert result.stdout.startswith("mmpool probe: FAIL")


def test_probe_config_with_errors_gives_a_probe_shaped_json_document(run_line) -> None:
    path = str(EXAMPLES / "invalid-mmpool.yaml")
    result = run_line(["mmpool", "probe", "--config", path, "--format", "json"])
    assert result.exit_code == 1
    data = json.loads(result.stdout)
    assert "command" not in data  # not validate's report
    assert data["status"] == "fail"
    assert data["stages"] == []
    assert f"{path}:4:3" in [f["location"] for f in data["findings"]]


@pytest.mark.parametrize("value", ["0", "-1", "nan", "inf", "3601"])
def test_timeout_outside_its_bounds_is_a_usage_error(run_line, value: str) -> None:
    result = run_line(["mmpool", "probe", "--timeout", value])
    assert result.exit_code == 2, result.stdout
    assert "--timeout" in result.stderr


def test_probe_config_and_pool_flags_do_not_mix(run_line) -> None:
    result = run_line(["mmpool", "probe", "--config", str(EXAMPLES / "mmpool.yaml"), "--workers", "3"])
    assert result.exit_code == 2
    assert "drop --workers or drop --config" in result.stderr


def test_probe_compares_the_larger_hbm_figure_with_free_memory() -> None:
    from types import SimpleNamespace

    from mmpool_cli.probe.stages import stage_gpu

    request = PlanRequest(budget=Budget(bytes=2**30, source="flag"), workers=4, tp_size=8, transport="cuda_vmm")
    plan = make_plan(request)
    assert plan.hbm is not None and plan.hbm.max_total_bytes > plan.hbm.total_bytes
    free = plan.hbm.total_bytes + 1  # room for the feature pools, not for the positional-embeds pools too
    gpu = GpuInfo(
        cuda_index=0, nvml_index=0, name="NVIDIA H200", uuid="GPU-1", total_bytes=free, free_bytes=free, used_bytes=0
    )
    stage = Stage("gpu", "Read the GPUs through NVML")
    probe = SimpleNamespace(plan=request, cuda_visible_devices=None, mem_fraction_static=None)
    stage_gpu(stage, probe, plan, [gpu], gpu)
    [finding] = [f for f in stage.findings if f.severity is Severity.error]
    assert finding.code == "does-not-fit"
    assert "positional-embeds" in finding.message
    assert stage.figures["predicted_bytes"] == plan.hbm.max_total_bytes
