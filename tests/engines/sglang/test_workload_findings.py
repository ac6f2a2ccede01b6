"""The plan's findings and KV figure for a workload: environment variables, landing range, notes."""

from __future__ import annotations

import pytest

from mmpool_cli.core.units import MiB
from mmpool_cli.engines.sglang import versions
from mmpool_cli.engines.sglang.env_vars import VlmCache, vlm_cache_from_env
from mmpool_cli.engines.sglang.models import Budget, PlanRequest
from mmpool_cli.engines.sglang.plan import make_plan
from mmpool_cli.errors import MmpoolError
from mmpool_cli.workload.families import FAMILIES
from mmpool_cli.workload.features import workload
from mmpool_cli.workload.items import parse_image
from mmpool_cli.workload.kv import KvModel, KvRequest
from mmpool_cli.workload.video_env import video_total_pixels

QWEN72 = KvModel(attention="mha", layers=80, kv_heads=8, head_dim=128, v_head_dim=128)


def plan(workers: int = 1, tp: int = 8, **kv):
    return make_plan(
        PlanRequest(
            budget=Budget(bytes=1024 * MiB, source="flag"),
            workers=workers,
            tp_size=tp,
            kv=KvRequest(
                model=QWEN72, **({"vlm_cache_mb": versions.release(versions.NEWEST).default_vlm_cache_mb} | kv)
            ),
        )
    )


def test_vlm_cache_is_read_as_sglang_reads_it() -> None:
    assert vlm_cache_from_env({}) == VlmCache(100)
    assert vlm_cache_from_env({"SGLANG_VLM_CACHE_SIZE_MB": "0"}) == VlmCache(0, "SGLANG_VLM_CACHE_SIZE_MB", "0")
    # SGL_ twins win, and int() is the parse: " 7 " is 7, "7MiB" is the default with a warning
    assert vlm_cache_from_env({"SGL_VLM_CACHE_SIZE_MB": " 7 ", "SGLANG_VLM_CACHE_SIZE_MB": "9"}).mb == 7
    invalid = VlmCache(100, "SGLANG_VLM_CACHE_SIZE_MB", "7MiB", invalid=True)
    assert vlm_cache_from_env({"SGLANG_VLM_CACHE_SIZE_MB": "7MiB"}) == invalid


def test_video_total_pixels_env() -> None:
    assert video_total_pixels({}) == 90_316_800
    assert video_total_pixels({"VIDEO_MAX_PIXELS": "1e8"}) == 100_000_000
    with pytest.raises(MmpoolError, match="VIDEO_MAX_PIXELS"):
        video_total_pixels({"VIDEO_MAX_PIXELS": "lots"})


def test_reservation_and_landing_range_with_one_worker() -> None:
    kv = plan().kv_cost
    assert kv.reserved_bytes == (1024 + 100) * MiB
    assert (kv.tokens_min, kv.tokens_max) == (28_774, 28_775)
    # the landing range adds the pool as the caching allocator reserves it and one CUDA context
    hbm = plan().hbm
    assert kv.landing_bytes == kv.reserved_bytes + hbm.total_bytes
    assert kv.landing_tokens_max == -(-kv.landing_bytes // kv.cell_bytes)


def test_no_landing_range_with_several_workers() -> None:
    kv = plan(workers=4).kv_cost
    assert kv.landing_bytes is None
    assert kv.landing_tokens_max is None


def test_fp8_halves_the_cell() -> None:
    assert plan(kv_cache_dtype="fp8_e4m3").kv_cost.cell_bytes == 20_480


def test_invalid_vlm_env_and_qwen3_note_are_findings() -> None:
    # the plan's own finding, whether or not a KV cost is asked for (one rule for every command)
    invalid = VlmCache(100, "SGLANG_VLM_CACHE_SIZE_MB", "x", invalid=True)
    budget = Budget(bytes=1024 * MiB, source="flag")
    codes = [f.code for f in make_plan(PlanRequest(budget=budget, vlm_cache=invalid)).findings]
    assert codes.count("env-vlm-cache-invalid") == 1
    assert "qwen3-vl-vlm-cache" in [f.code for f in plan(qwen3_vl=True).findings]


def test_workload_slices_follow_the_transport() -> None:
    fam = FAMILIES["qwen2.5-vl"]
    load = workload("qwen2.5-vl", fam, dict(fam.settings), [parse_image("1920x1080")], True)
    for transport, slice_bytes in (("cuda_ipc", 50_633_984), ("cuda_vmm", 50_634_240)):
        result = make_plan(
            PlanRequest(budget=Budget(bytes=1024 * MiB, source="flag"), transport=transport, workload=load)
        )
        assert result.features[0].slice_bytes == slice_bytes
        note = next(f for f in result.findings if f.code == "workload-request")
        assert f"{slice_bytes:,} bytes" in note.message
