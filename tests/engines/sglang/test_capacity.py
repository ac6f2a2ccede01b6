"""Capacity: how features sit in one fresh pool, what the pools take in HBM, and the GPU bounds."""

from __future__ import annotations

import pytest

from mmpool_cli.core.findings import Severity
from mmpool_cli.core.units import MiB
from mmpool_cli.engines.sglang import versions
from mmpool_cli.engines.sglang.capacity import check_bounds, feature_fit, hbm_estimate
from mmpool_cli.engines.sglang.models import Budget, PlanRequest

NEWEST = versions.release(versions.NEWEST)
GiB = 1024 * MiB


def _request(**fields: object) -> PlanRequest:
    return PlanRequest(budget=Budget(bytes=GiB, source="flag"), **fields)  # type: ignore[arg-type]


class Found(list):
    def __call__(self, severity: Severity, code: str, message: str, subject: str | None) -> None:
        self.append((severity, code, subject))


def test_a_qwen_image_fits_five_times_in_a_quarter_gib_pool_at_tp8() -> None:
    add = Found()
    usable = 256 * MiB - NEWEST.header_bytes(8)
    fit = feature_fit(_request(workers=4, tp_size=8), NEWEST, 50_633_856, usable, 8, add)
    assert (fit.slice_bytes, fit.fit_per_worker, fit.fit_per_node, fit.limited_by) == (50_633_984, 5, 20, "bytes")
    assert add == []


def test_small_features_are_limited_by_the_slot_cap() -> None:
    add = Found()
    fit = feature_fit(_request(), NEWEST, 256, GiB - NEWEST.header_bytes(1), 1, add)
    assert (fit.fit_per_worker, fit.limited_by) == (NEWEST.max_inflight_slices, "slots")
    assert add == [(Severity.info, "feature-slot-cap", "feature_sizes")]


def test_a_feature_larger_than_the_pool_never_fits_and_names_a_budget_that_does() -> None:
    add = Found()
    fit = feature_fit(_request(), NEWEST, 2 * GiB, GiB - NEWEST.header_bytes(1), 1, add, item="video 1")
    assert fit.fit_per_worker == 0
    assert add == [(Severity.warning, "feature-never-fits", "workload")]


def test_an_empty_feature_is_an_error_and_fits_nothing() -> None:
    add = Found()
    fit = feature_fit(_request(), NEWEST, 0, GiB, 1, add)
    assert fit.fit_per_worker is None
    assert add == [(Severity.error, "feature-empty", "feature_sizes")]


def test_cuda_vmm_slices_carry_their_control_words() -> None:
    add = Found()
    fit = feature_fit(_request(transport="cuda_vmm"), NEWEST, 6 * MiB, 256 * MiB, 8, add)
    assert (fit.slice_bytes, fit.fit_per_worker) == (6 * MiB + 256, 42)


@pytest.mark.parametrize(
    ("allocation", "expandable", "reserved", "code"),
    [
        (GiB, False, GiB, None),
        (5 * MiB, False, 20 * MiB, "allocator-rounding"),
        (GiB, True, 1040 * MiB, "allocator-rounding"),
    ],
)
def test_hbm_estimate_is_what_the_caching_allocator_reserves(
    allocation: int, expandable: bool, reserved: int, code: str | None
) -> None:
    add = Found()
    request = _request(workers=2, expandable_segments=expandable, context_bytes=500 * MiB)
    hbm = hbm_estimate(request, NEWEST, allocation, allocation, add)
    assert (hbm.pool_reserved_bytes_per_worker, hbm.pool_reserved_bytes) == (reserved, 2 * reserved)
    assert hbm.total_bytes == 2 * (reserved + 500 * MiB)
    assert hbm.allocator == ("caching-expandable" if expandable else "caching")
    assert [c for _, c, _ in add] == ([code] if code else [])


def test_bounds_a_negative_gpu_and_more_hbm_than_any_gpu() -> None:
    add = Found()
    request = _request(workers=64, base_gpu_id=-1)
    hbm = hbm_estimate(request, NEWEST, 4 * GiB, 4 * GiB, Found())
    check_bounds(request, 256 * GiB, hbm, add)
    assert [c for _, c, _ in add] == ["base-gpu-id-negative", "hbm-exceeds-gpu"]
