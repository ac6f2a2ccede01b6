"""The probe's stages judged on given measurements: no GPU needed, the measurements are the inputs."""

from __future__ import annotations

from fractions import Fraction
from types import SimpleNamespace

import pytest

from mmpool_cli.core.units import MiB
from mmpool_cli.engines.sglang.models import Budget, PlanRequest
from mmpool_cli.engines.sglang.plan import make_plan
from mmpool_cli.probe import devices as dv
from mmpool_cli.probe import stages
from mmpool_cli.probe.probe_report import GpuInfo, Stage

GiB = 1024 * MiB
REQUEST = PlanRequest(budget=Budget(bytes=GiB, source="flag"), workers=4, tp_size=8)
PLAN = make_plan(REQUEST)
VMM = make_plan(PlanRequest(budget=Budget(bytes=GiB, source="flag"), transport="cuda_vmm"))


def gpu(free: int, total: int = 141 * GiB) -> GpuInfo:
    return GpuInfo(
        cuda_index=0,
        nvml_index=0,
        name="NVIDIA H200",
        uuid="GPU-0",
        total_bytes=total,
        free_bytes=free,
        used_bytes=total - free,
    )


def probe_request(fraction: Fraction | None = None) -> SimpleNamespace:
    return SimpleNamespace(cuda_visible_devices=None, mem_fraction_static=fraction, plan=REQUEST)


def codes(stage: Stage) -> list[str]:
    return [f.code for f in stage.findings]


def test_the_reservation_fits_the_free_memory() -> None:
    stage = Stage("gpu", "GPU")
    stages.stage_gpu(stage, probe_request(), PLAN, [gpu(100 * GiB)], gpu(100 * GiB))
    assert (stage.status, codes(stage)) == ("pass", ["fits"])
    assert stage.figures["headroom_bytes"] == 100 * GiB - PLAN.hbm.total_bytes


def test_too_little_free_memory_fails_the_stage() -> None:
    stage = Stage("gpu", "GPU")
    stages.stage_gpu(stage, probe_request(), PLAN, [gpu(GiB)], gpu(GiB))
    assert (stage.status, codes(stage)) == ("fail", ["does-not-fit"])


def test_a_missing_base_gpu_fails_before_anything_is_measured() -> None:
    stage = Stage("gpu", "GPU")
    stages.stage_gpu(stage, probe_request(), PLAN, [], None)
    assert (stage.status, codes(stage)) == ("fail", ["base-gpu-missing"])


@pytest.mark.parametrize(
    ("fraction", "code"),
    [
        (Fraction(85, 100), "kv-headroom"),
        (Fraction(985, 1000), "kv-headroom-tight"),
        (Fraction(99, 100), "kv-headroom-exceeded"),
    ],
)
def test_the_kv_headroom_left_by_mem_fraction_static(fraction: Fraction, code: str) -> None:
    stage = Stage("gpu", "GPU")
    stages.stage_gpu(stage, probe_request(fraction), PLAN, [gpu(140 * GiB)], gpu(140 * GiB))
    assert codes(stage) == ["fits", code]


def test_compare_says_as_predicted_or_how_far_off() -> None:
    stage = Stage("alloc", "Allocate")
    stages.compare(stage, "allocator", 2 * MiB, 2 * MiB, "per pool")
    stages.compare(stage, "allocator", 4 * MiB, 2 * MiB, "per pool")
    stages.compare(stage, "context", 500 * MiB, 527 * MiB, "per process")
    assert [(f.severity.value, f.code) for f in stage.findings] == [
        ("info", "allocator-as-predicted"),
        ("warning", "allocator-differs"),
        ("info", "context-differs"),
    ]
    assert "+2,097,152 bytes" in stage.findings[1].message


def test_vmm_facts_against_a_cuda_vmm_plan() -> None:
    stage = Stage("vmm", "VMM")
    facts = {"available": True, "handle_types": {"POSIX_FD": {"create": True, "recommended": 4 * MiB}, "FABRIC": {}}}
    stages.stage_vmm(stage, facts, VMM)
    assert codes(stage) == ["vmm-granularity-differs", "vmm-facts"]
    stage = Stage("vmm", "VMM")
    stages.stage_vmm(stage, {"available": False}, VMM)
    assert (stage.status, codes(stage)) == ("skip", ["vmm-unchecked"])


def test_memory_not_back_at_its_baseline(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(dv, "free_bytes", lambda index: 90 * GiB)
    stage = Stage("release", "Release")
    stages.baseline(stage, gpu(100 * GiB), 100 * GiB, wait=0)
    assert (stage.status, codes(stage), stage.figures["free_after_bytes"]) == (
        "fail",
        ["memory-not-released"],
        90 * GiB,
    )
    stage = Stage("release", "Release")
    stages.baseline(stage, gpu(100 * GiB), 90 * GiB + MiB, wait=0)
    assert codes(stage) == []
