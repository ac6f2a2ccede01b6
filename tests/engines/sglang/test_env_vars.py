"""The environment read as SGLang 0.5.23 reads it: int(), float(), EnvBool, SGL_ twins, dotenv files."""

from __future__ import annotations

import pytest

from mmpool_cli.engines.sglang.env_vars import budget_from_env, env_findings, read_launch_env, resolve_budget
from mmpool_cli.engines.sglang.rules import parse_env_bool


@pytest.mark.parametrize(
    ("raw", "mb", "invalid"),
    [
        (" 12 ", 12, False),
        ("1_000", 1000, False),
        ("+5", 5, False),
        ("٣", 3, False),
        ("-5", -5, False),
        ("1.5", 1024, True),
        ("", 1024, True),
        ("0x10", 1024, True),
        ("1GB", 1024, True),
    ],
)
def test_budget_read_with_int(raw: str, mb: int, invalid: bool) -> None:
    budget = budget_from_env({"SGLANG_MM_FEATURE_CACHE_MB": raw})
    assert (budget.bytes // 2**20, budget.invalid) == (mb, invalid)


@pytest.mark.parametrize(
    ("raw", "code"),
    [
        ("nan", "env-recycle-nan"),
        ("0", "env-recycle-not-positive"),
        ("-1", "env-recycle-not-positive"),
        ("inf", "env-recycle-too-large"),
        ("1e10", "env-recycle-too-large"),
        ("fast", "env-recycle-invalid"),
        (" 0.05 ", None),
        ("1e-3", None),
    ],
)
def test_recycle_interval(raw: str, code: str | None) -> None:
    found = [f.code for f in env_findings({"SGLANG_MM_ITEM_MEM_POOL_RECYCLE_INTERVAL_SEC": raw})]
    assert found == ([code] if code else [])


def test_sgl_twin_overrides() -> None:
    env = {"SGL_MM_ITEM_MEM_POOL_RECYCLE_INTERVAL_SEC": "0", "SGLANG_MM_ITEM_MEM_POOL_RECYCLE_INTERVAL_SEC": "0.05"}
    assert [f.code for f in env_findings(env)] == ["env-legacy-overrides", "env-recycle-not-positive"]


@pytest.mark.parametrize(("raw", "value"), [("1", True), ("YES", True), ("n", False), (" 1", None), ("", None)])
def test_env_bool(raw: str, value: bool | None) -> None:
    assert parse_env_bool(raw) is value


def test_legacy_transport_set_but_invalid_is_false() -> None:
    launch = read_launch_env({"SGLANG_USE_CUDA_IPC_TRANSPORT": ""})
    assert (launch.legacy_transport_set, launch.legacy_transport_on) == (True, False)
    assert [f.code for f in env_findings({"SGLANG_USE_CUDA_IPC_TRANSPORT": "maybe"})] == [
        "env-legacy-transport-invalid"
    ]


@pytest.mark.parametrize(
    ("environ", "retention"),
    [({}, False), ({"SGLANG_VLM_CACHE_SIZE_MB": "0"}, False), ({"SGLANG_VLM_CACHE_SIZE_MB": "x"}, True)],
)
def test_vlm_cache_retention(environ: dict[str, str], retention: bool) -> None:
    assert read_launch_env(environ).vlm_cache.retention is retention


def test_launch_env_reads_every_pool_setting_once() -> None:
    launch = read_launch_env(
        {
            "SGL_MM_FEATURE_CACHE_MB": "2048",
            "PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True",
            "CUDA_VISIBLE_DEVICES": "1,0",
        }
    )
    assert (launch.budget.bytes, launch.budget.variable, launch.budget_is_set) == (
        2048 * 2**20,
        "SGL_MM_FEATURE_CACHE_MB",
        True,
    )
    assert launch.expandable_segments
    assert launch.cuda_visible_devices == "1,0"
    assert read_launch_env({"SGLANG_MM_FEATURE_CACHE_MB": "x"}).budget.invalid


def test_resolve_budget_flag_over_config_over_env() -> None:
    from mmpool_cli.engines.sglang.models import Budget

    launch = read_launch_env({"SGLANG_MM_FEATURE_CACHE_MB": "7"})
    flag, config = Budget(bytes=1, source="flag"), Budget(bytes=2, source="config")
    assert resolve_budget(launch, flag, config) is flag
    assert resolve_budget(launch, None, config) is config
    assert resolve_budget(launch).source == "env"
    assert resolve_budget(read_launch_env({})).source == "default"
