"""SGLang's pool rules as integer functions: rules.py and the newest release's record."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mmpool_cli.core.units import MiB, align_up
from mmpool_cli.engines.sglang import rules as sg
from mmpool_cli.engines.sglang import versions

REL = versions.release(versions.NEWEST)


@pytest.mark.parametrize(
    ("consumers", "header"),
    [(1, 32_768), (2, 49_152), (4, 81_920), (8, 147_456), (16, 278_528), (32, 540_672), (64, 1_064_960)],
)
def test_ipc_header_table(consumers: int, header: int) -> None:
    assert REL.header_bytes(consumers) == header


def test_align_up() -> None:
    assert align_up(0, 256) == 0
    assert align_up(1, 256) == 256
    assert align_up(256, 256) == 256
    assert align_up(257, 256) == 512


@pytest.mark.parametrize(
    ("tp", "dp", "attn_dp", "dpa", "expected"),
    [
        (8, 1, 1, False, 8),
        (8, 8, 1, True, 1),  # --enable-dp-attention means --attn-dp-size 8 --dp-size 1
        (8, 2, 1, False, 8),  # DP replicas: each replica's TP ranks read the pool
        (8, 4, 1, True, 2),
        (8, 1, 4, False, 2),
        (8, 1, 4, True, 2),  # an explicit --attn-dp-size wins over the deprecated flag
        (1, 1, 1, False, 1),
    ],
)
def test_consumer_count(tp: int, dp: int, attn_dp: int, dpa: bool, expected: int) -> None:
    assert sg.consumer_count(tp, *sg.resolve_attention_dp(dp, attn_dp, dpa)) == expected


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("1024", 1024),
        (" 12 ", 12),
        ("+5", 5),
        ("-5", -5),
        ("0", 0),
        ("1_000", 1000),
        ("٣", 3),
        ("", None),
        ("1.5", None),
        ("512KB", None),
        ("0x800", None),
        ("1e3", None),
        ("1GB", None),
    ],
)
def test_env_int_is_pythons_int(raw: str, expected: int | None) -> None:
    assert sg.parse_env_int(raw) == expected


def test_sgl_twin_overrides() -> None:
    assert sg.env_name(sg.ENV_BUDGET, {}) is None
    assert sg.env_name(sg.ENV_BUDGET, {"SGLANG_MM_FEATURE_CACHE_MB": "1"}) == ("SGLANG_MM_FEATURE_CACHE_MB", "1")
    both = {"SGLANG_MM_FEATURE_CACHE_MB": "1", "SGL_MM_FEATURE_CACHE_MB": "2"}
    assert sg.env_name(sg.ENV_BUDGET, both) == ("SGL_MM_FEATURE_CACHE_MB", "2")


@pytest.mark.parametrize(
    ("n", "default", "expandable"),
    [
        (1_048_576, 2_097_152, 2_097_152),
        (4_194_304, 20_971_520, 20_971_520),
        (9_437_184, 20_971_520, None),
        (10_485_760, 10_485_760, None),
        (10_485_761, 12_582_912, 20_971_520),
        (67_108_864, 67_108_864, None),
        (268_435_456, 268_435_456, None),
        (357_913_941, 358_612_992, 377_487_360),
        (1_073_741_824, 1_073_741_824, 1_090_519_040),
        (1, 2_097_152, 2_097_152),
        (0, 0, 0),
    ],
)
def test_caching_allocator_model_matches_h200_measurements(n: int, default: int, expandable: int | None) -> None:
    assert sg.caching_allocator_reserved(n) == default
    if expandable is not None:  # only the sizes measured with expandable segments
        assert sg.caching_allocator_reserved(n, expandable_segments=True) == expandable


@pytest.mark.parametrize(
    ("conf", "expected"),
    [
        (None, False),
        ("", False),
        ("expandable_segments:True", True),
        ("max_split_size_mb:128,expandable_segments:True", True),
        ("expandable_segments:False", False),
        ("expandable_segments:true", False),
    ],
)
def test_expandable_segments(conf: str | None, expected: bool) -> None:
    assert sg.expandable_segments_enabled(conf) is expected


def test_vmm_rules() -> None:
    assert sg.vmm_allocation_bytes(357_913_941, 2 * 2**20) == 356_515_840
    assert REL.vmm_lease_control_bytes(8) == 256
    assert REL.vmm_lease_control_bytes(65) == 512
    assert REL.vmm_slice_bytes(6 * 2**20, 8) == 6_291_712
    assert REL.vmm_fit(268_435_456, 6 * 2**20, 8) == 42


def test_messages_are_sglangs() -> None:
    assert sg.msg_too_small(131072, 147456) == (
        "CUDA IPC pool is too small after control metadata: pool=131072, control=147456"
    )
    assert sg.msg_below_granularity(1048576, 2097152) == (
        "memory_size=1048576 is smaller than CUDA VMM granularity=2097152"
    )


@given(st.integers(1, 256), st.integers(1, 128))
def test_smallest_valid_budget_is_the_threshold(workers: int, consumers: int) -> None:
    mb = REL.smallest_valid_budget_mb(workers, "cuda_ipc", consumers, 0)
    header = REL.header_bytes(consumers)
    assert mb * MiB // workers > header
    assert mb == 1 or (mb - 1) * MiB // workers <= header


@given(st.integers(1, 2**40), st.integers(1, 2**30))
def test_ipc_fit_never_overfills(usable: int, nbytes: int) -> None:
    fit = REL.fit(usable, nbytes)
    assert 0 <= fit <= REL.max_inflight_slices
    assert fit * REL.slice_bytes(nbytes) <= usable
    assert fit == REL.max_inflight_slices or (fit + 1) * REL.slice_bytes(nbytes) > usable
