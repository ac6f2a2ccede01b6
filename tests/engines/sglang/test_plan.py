"""The plan against the spec's worked examples (A-G) and SGLang's failure modes."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mmpool_cli.core.units import MiB
from mmpool_cli.engines.sglang.env_vars import budget_from_env
from mmpool_cli.engines.sglang.models import Budget, PlanRequest
from mmpool_cli.engines.sglang.plan import make_plan

SIX_MIB = 6 * MiB


def plan_for(mb: int | None = None, size: int | None = None, **kwargs):
    budget = Budget(bytes=size if size is not None else (mb or 0) * MiB, source="flag")
    return make_plan(PlanRequest(budget=budget, **kwargs))


def codes(plan) -> set[str]:
    return {f.code for f in plan.findings}


def test_a_default_budget_four_workers_tp8() -> None:
    plan = plan_for(1024, workers=4, tp_size=8, feature_sizes=(SIX_MIB,))
    assert plan.status == "ok"
    assert plan.effective_budget_bytes == 1_073_741_824
    assert plan.per_worker_bytes == 268_435_456
    assert plan.unused_bytes == 0
    assert plan.consumers == 8
    assert plan.header_bytes == 147_456
    assert plan.usable_bytes_per_worker == 268_288_000
    (feature,) = plan.features
    assert (feature.slice_bytes, feature.fit_per_worker, feature.fit_per_node) == (6_291_456, 42, 168)
    assert plan.hbm is not None
    assert plan.hbm.pool_reserved_bytes == 4 * 268_435_456
    assert plan.hbm.allocator_overhead_bytes == 0
    assert "allocator-rounding" not in codes(plan)


def test_b_one_worker() -> None:
    plan = plan_for(1024, workers=1, tp_size=8, feature_sizes=(SIX_MIB,))
    assert plan.usable_bytes_per_worker == 1_073_594_368
    assert plan.features[0].fit_per_worker == 170


def test_c_three_workers_leave_a_byte_and_round_up_in_hbm() -> None:
    plan = plan_for(1024, workers=3, tp_size=8, feature_sizes=(SIX_MIB,))
    assert plan.per_worker_bytes == 357_913_941
    assert plan.unused_bytes == 1
    assert plan.usable_bytes_per_worker == 357_766_485
    assert plan.features[0].fit_per_worker == 56
    assert plan.hbm is not None
    assert plan.hbm.pool_reserved_bytes == 3 * 358_612_992 == 1_075_838_976
    assert {"split-remainder", "allocator-rounding"} <= codes(plan)
    assert plan.status == "ok"


def test_d_sixteen_workers() -> None:
    plan = plan_for(1024, workers=16, tp_size=8, feature_sizes=(SIX_MIB,))
    assert plan.per_worker_bytes == 67_108_864
    assert plan.features[0].fit_per_worker == 10


def test_e_too_small_after_control_metadata() -> None:
    plan = plan_for(1, workers=8, tp_size=8)
    assert plan.status == "fail"
    (error,) = plan.errors
    assert error.code == "pool-too-small"
    assert "CUDA IPC pool is too small after control metadata: pool=131072, control=147456" in error.message
    assert "SGLANG_MM_FEATURE_CACHE_MB to at least 2" in error.message
    assert plan.usable_bytes_per_worker is None
    assert plan.settings is None
    assert plan.hbm is None


def test_f_cuda_vmm() -> None:
    plan = plan_for(1024, workers=4, tp_size=8, transport="cuda_vmm", feature_sizes=(SIX_MIB,))
    assert plan.allocation_bytes_per_worker == 268_435_456
    assert plan.header_bytes == 0
    assert plan.lease_control_bytes == 256
    assert plan.features[0].slice_bytes == 6_291_712
    assert plan.features[0].fit_per_worker == 42
    assert plan.max_inflight_slices is None
    three = plan_for(1024, workers=3, tp_size=8, transport="cuda_vmm", feature_sizes=(SIX_MIB,))
    assert three.allocation_bytes_per_worker == 356_515_840
    assert three.features[0].fit_per_worker == 56
    assert three.hbm is not None and three.hbm.pool_reserved_bytes_per_worker == 356_515_840
    tiny = plan_for(1, transport="cuda_vmm")
    assert [e.code for e in tiny.errors] == ["vmm-below-granularity"]
    assert "memory_size=1048576 is smaller than CUDA VMM granularity=2097152" in tiny.errors[0].message


def test_g_dp_attention_consumers() -> None:
    vmm = plan_for(1024, tp_size=8, dp_size=8, enable_dp_attention=True, transport="cuda_vmm")
    assert vmm.consumers == 1
    assert vmm.lease_control_bytes == 256
    ipc = plan_for(1024, tp_size=8, dp_size=8, enable_dp_attention=True)
    assert ipc.header_bytes == 32_768
    assert ipc.settings is not None
    assert ipc.settings.args[-2:] == ["--attn-dp-size", "8"]
    assert plan_for(1024, tp_size=8, attn_dp_size=4).consumers == 2


def test_budget_that_floors_to_zero_names_the_smallest_valid_value() -> None:
    plan = plan_for(size=1_000_000)
    assert plan.status == "fail"
    assert plan.sglang_mm_feature_cache_mb == 0
    (error,) = plan.errors
    assert error.code == "budget-floors-to-zero"
    assert "total_pool_size must be positive" in error.message
    assert "SGLANG_MM_FEATURE_CACHE_MB=1" in error.message
    big = plan_for(size=1_000_000, workers=64, tp_size=8)
    assert "SGLANG_MM_FEATURE_CACHE_MB=10" in big.errors[0].message


def test_budget_not_whole_mib_warns_with_what_sglang_reserves() -> None:
    plan = plan_for(size=10**9, workers=4)
    assert plan.status == "ok"
    assert plan.sglang_mm_feature_cache_mb == 953
    assert plan.effective_budget_bytes == 953 * MiB
    assert plan.floor_loss_bytes == 10**9 - 953 * MiB
    assert "budget-not-whole-mib" in codes(plan)
    assert plan.settings is not None
    assert plan.settings.env == {"SGLANG_MM_FEATURE_CACHE_MB": "953"}


@pytest.mark.parametrize("workers", [0, -1])
def test_workers_must_be_positive(workers: int) -> None:
    plan = plan_for(1024, workers=workers)
    assert "workers-not-positive" in {e.code for e in plan.errors}
    assert "Tokenizer worker num must >= 1" in plan.errors[0].message
    assert plan.per_worker_bytes is None


def test_attention_dp_larger_than_tp() -> None:
    plan = plan_for(1024, tp_size=4, dp_size=8, enable_dp_attention=True)
    assert "attention-dp-not-divisor" in {e.code for e in plan.errors}


def test_dp_replicas_with_attention_dp_are_refused() -> None:
    plan = plan_for(1024, tp_size=8, dp_size=2, attn_dp_size=4)
    (error,) = plan.errors
    assert error.code == "dp-replicas-with-attention-dp"
    assert "data-parallel replicas combined with attention data parallelism are not supported" in error.message


def test_feature_that_never_fits_warns_with_the_budget_that_would() -> None:
    plan = plan_for(64, workers=4, tp_size=8, feature_sizes=(50_633_856,))
    assert plan.status == "ok"
    assert plan.features[0].fit_per_worker == 0
    (warning,) = [f for f in plan.findings if f.code == "feature-never-fits"]
    assert "CPU path" in warning.message
    assert "SGLANG_MM_FEATURE_CACHE_MB=194" in warning.message
    fits = plan_for(194, workers=4, tp_size=8, feature_sizes=(50_633_856,))
    assert fits.features[0].fit_per_worker == 1
    short = plan_for(193, workers=4, tp_size=8, feature_sizes=(50_633_856,))
    assert short.features[0].fit_per_worker == 0


def test_slot_cap_limits_tiny_features() -> None:
    plan = plan_for(1024, feature_sizes=(1,))
    feature = plan.features[0]
    assert feature.slice_bytes == 256
    assert feature.fit_per_worker == 4096
    assert feature.limited_by == "slots"
    assert "feature-slot-cap" in codes(plan)


def test_empty_feature_is_an_error() -> None:
    plan = plan_for(1024, feature_sizes=(0,))
    assert "feature-empty" in {e.code for e in plan.errors}


def test_expandable_segments_change_the_reservation() -> None:
    plan = plan_for(1024, expandable_segments=True)
    assert plan.hbm is not None
    assert plan.hbm.allocator == "caching-expandable"
    assert plan.hbm.pool_reserved_bytes == 1_090_519_040


@pytest.mark.parametrize(
    ("environ", "mb", "source", "invalid"),
    [
        ({}, 1024, "default", False),
        ({"SGLANG_MM_FEATURE_CACHE_MB": "2048"}, 2048, "env", False),
        ({"SGLANG_MM_FEATURE_CACHE_MB": " 512 "}, 512, "env", False),
        ({"SGLANG_MM_FEATURE_CACHE_MB": "1GB"}, 1024, "env", True),
        ({"SGLANG_MM_FEATURE_CACHE_MB": ""}, 1024, "env", True),
        ({"SGLANG_MM_FEATURE_CACHE_MB": "1.5"}, 1024, "env", True),
        ({"SGLANG_MM_FEATURE_CACHE_MB": "-5"}, -5, "env", False),
        ({"SGLANG_MM_FEATURE_CACHE_MB": "64", "SGL_MM_FEATURE_CACHE_MB": "128"}, 128, "env", False),
    ],
)
def test_budget_from_env_reads_like_sglang(environ, mb: int, source: str, invalid: bool) -> None:
    budget = budget_from_env(environ)
    assert budget.bytes == mb * MiB
    assert budget.source == source
    assert budget.invalid is invalid


def test_invalid_env_is_an_error_with_the_value_meant() -> None:
    plan = make_plan(PlanRequest(budget=budget_from_env({"SGLANG_MM_FEATURE_CACHE_MB": "2GiB"})))
    assert plan.sglang_mm_feature_cache_mb == 1024
    (error,) = plan.errors
    assert error.code == "env-budget-invalid"
    assert "set it to 2048" in error.message


def test_negative_env_budget() -> None:
    plan = make_plan(PlanRequest(budget=budget_from_env({"SGLANG_MM_FEATURE_CACHE_MB": "-5"})))
    assert [e.code for e in plan.errors] == ["budget-not-positive"]
    assert plan.per_worker_bytes is None


def test_legacy_twin_is_reported() -> None:
    environ = {"SGLANG_MM_FEATURE_CACHE_MB": "64", "SGL_MM_FEATURE_CACHE_MB": "128"}
    plan = make_plan(PlanRequest(budget=budget_from_env(environ)))
    assert "env-legacy-overrides" in codes(plan)
    assert plan.sglang_mm_feature_cache_mb == 128


@given(
    st.integers(1, 1 << 20),
    st.integers(1, 64),
    st.sampled_from([1, 2, 4, 8, 16]),
    st.sampled_from(["cuda_ipc", "cuda_vmm"]),
    st.lists(st.integers(1, 1 << 31), max_size=3),
)
def test_plan_invariants(mb: int, workers: int, tp: int, transport: str, features: list[int]) -> None:
    plan = plan_for(mb, workers=workers, tp_size=tp, transport=transport, feature_sizes=tuple(features))
    assert plan.per_worker_bytes is not None and plan.unused_bytes is not None
    assert plan.per_worker_bytes * workers + plan.unused_bytes == mb * MiB
    assert 0 <= plan.unused_bytes < workers
    if plan.status == "ok":
        assert plan.usable_bytes_per_worker is not None
        assert 0 < plan.usable_bytes_per_worker <= plan.per_worker_bytes
        for f in plan.features:
            assert f.fit_per_worker is not None
            assert f.fit_per_worker * f.slice_bytes <= plan.usable_bytes_per_worker
    else:
        assert plan.errors and plan.settings is None


# --- the positional-embeds pool under cuda_vmm (0.5.22 and later) -------------------------------


def _vmm(version: str = "0.5.23", expandable: bool = False):
    request = PlanRequest(
        budget=Budget(bytes=2**30, source="flag"),
        workers=4,
        tp_size=8,
        transport="cuda_vmm",
        expandable_segments=expandable,
        sglang_version=version,
    )
    return make_plan(request)


def test_vmm_hbm_gives_both_figures_with_the_positional_pools() -> None:
    hbm = _vmm().hbm
    assert hbm is not None
    # the feature pools (VMM) and contexts, as before
    assert hbm.total_bytes == 4 * (268_435_456 + 552_402_944)
    # SGLang's PositionalEmbedsTransport: one torch.empty(B // W) per worker on the base GPU, caching allocator
    assert hbm.positional_pool_bytes_per_worker == 268_435_456
    assert hbm.positional_pool_bytes == 4 * 268_435_456
    assert hbm.max_total_bytes == hbm.total_bytes + 4 * 268_435_456


def test_the_positional_pool_rounds_as_the_caching_allocator_does() -> None:
    hbm = _vmm(expandable=True).hbm
    assert hbm is not None
    assert hbm.positional_pool_bytes_per_worker == 13 * 20 * 2**20  # 20 MiB pages with expandable segments
    assert hbm.max_total_bytes == hbm.total_bytes + 4 * 13 * 20 * 2**20


SEVERAL_NODES = make_plan(PlanRequest(budget=Budget(bytes=2**30, source="flag"), transport="cuda_vmm", nnodes=2))


@pytest.mark.parametrize(
    "plan", [_vmm("0.5.21"), make_plan(PlanRequest(budget=Budget(bytes=2**30, source="flag"))), SEVERAL_NODES]
)
def test_no_second_pool_before_0_5_22_under_cuda_ipc_or_on_several_nodes(plan) -> None:
    # before 0.5.22 there is no positional-embeds transport; under cuda_ipc it reuses the feature pool;
    # on several nodes it is off (PositionalEmbedsTransport.enabled needs nnodes == 1)
    assert "positional-embeds-pool" not in {f.code for f in plan.findings}
    assert plan.hbm is not None
    assert plan.hbm.positional_pool_bytes == 0
    assert plan.hbm.max_total_bytes == plan.hbm.total_bytes


def _fits_one(plan) -> int:
    """The budget the feature-never-fits hint names, read from its message."""
    import re

    (warning,) = [f for f in plan.findings if f.code == "feature-never-fits"]
    return int(re.search(r"SGLANG_MM_FEATURE_CACHE_MB=(\d+) fits one", warning.message)[1])


@pytest.mark.parametrize("version", ["0.5.11", "0.5.13", "0.5.15"])
def test_the_floor_rule_splits_a_budget_the_workers_do_not_divide_by_floor_division(version: str) -> None:
    # SGLang 0.5.11-0.5.15, multimodal/processors/base_processor.py:266 (0.5.13):
    # per_worker_pool_size = max(MM_FEATURE_CACHE_SIZE // worker_num, 128 * 1024 * 1024).
    # 1024 MiB over 3 workers: 1,073,741,824 = 3 x 357,913,941 + 1, so 357,913,941 bytes each
    # (above the 128 MiB floor) and 1 byte left over; 7 workers: 7 x 153,391,689 + 1.
    plan = plan_for(1024, workers=3, sglang_version=version)
    assert (plan.per_worker_bytes, plan.unused_bytes) == (357_913_941, 1)
    assert plan_for(1024, workers=7, sglang_version=version).per_worker_bytes == 153_391_689
    # 1000 MiB over 9 workers: 1,048,576,000 // 9 = 116,508,444 is below the floor, so 128 MiB
    assert plan_for(1000, workers=9, sglang_version=version).per_worker_bytes == 134_217_728


def test_the_cuda_vmm_hint_names_the_budget_whose_allocation_holds_one_chunk() -> None:
    # SGLang 0.5.23 utils/cuda_vmm_transport_utils.py: a chunk is align_up(control + data, 256)
    # (:394), control = align_up(consumers x 4, 256) = 256 at TP 1 (:367), and the pool is the
    # worker's share rounded down to the 2 MiB granularity (:320). A 4,194,048-byte feature:
    # 256 + 4,194,048 = 4,194,304 = exactly 4 MiB, so 4 MiB (two granules) holds it and 3 MiB
    # (one granule) does not: the hint is 4. One byte more is 4,194,560 bytes: three granules, 6.
    plan = plan_for(size=2 * MiB, transport="cuda_vmm", feature_sizes=(4_194_048,))
    assert _fits_one(plan) == 4
    assert plan_for(4, transport="cuda_vmm", feature_sizes=(4_194_048,)).features[0].fit_per_worker == 1
    assert plan_for(3, transport="cuda_vmm", feature_sizes=(4_194_048,)).features[0].fit_per_worker == 0
    assert _fits_one(plan_for(size=2 * MiB, transport="cuda_vmm", feature_sizes=(4_194_049,))) == 6


def test_the_no_split_hint_of_0_5_10_is_one_workers_budget_whatever_the_workers() -> None:
    # SGLang 0.5.10, multimodal/processors/base_processor.py:252: every worker's pool is
    # MmItemMemoryPool(MM_FEATURE_CACHE_SIZE), the whole budget, with no header and no alignment;
    # a tensor fits a free chunk with mem_size >= its bytes (utils/cuda_ipc_transport_utils.py:193).
    # So a 200 MiB feature needs SGLANG_MM_FEATURE_CACHE_MB=200 with 1 worker or 4; a byte more, 201.
    for workers in (1, 4):
        plan = plan_for(100, workers=workers, feature_sizes=(200 * MiB,), sglang_version="0.5.10")
        assert _fits_one(plan) == 200
        fits = plan_for(200, workers=workers, feature_sizes=(200 * MiB,), sglang_version="0.5.10")
        assert fits.features[0].fit_per_worker == 1
    plan = plan_for(100, workers=4, feature_sizes=(200 * MiB + 1,), sglang_version="0.5.10")
    assert _fits_one(plan) == 201
