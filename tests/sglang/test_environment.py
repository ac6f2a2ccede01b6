"""The environment read as SGLang 0.5.23 reads it: int(), float(), EnvBool, SGL_ twins, dotenv files."""

from __future__ import annotations

from pathlib import Path

import pytest

from mmpool_cli.core.plan import budget_from_env
from mmpool_cli.sglang.environment import (
    EnvArgError,
    assemble,
    env_findings,
    legacy_transport,
    parse_env_arg,
    read_env_file,
)
from mmpool_cli.sglang.rules import parse_env_bool


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
    assert legacy_transport({"SGLANG_USE_CUDA_IPC_TRANSPORT": ""}) == (True, False)
    assert [f.code for f in env_findings({"SGLANG_USE_CUDA_IPC_TRANSPORT": "maybe"})] == [
        "env-legacy-transport-invalid"
    ]


def test_env_file(tmp_path: Path) -> None:
    path = tmp_path / "e.env"
    path.write_text("A=1\nexport B='two words'\n# c\n\nC=\"x\" \nD=3 # note\nbad line\n")
    values, findings = read_env_file(str(path))
    assert values == {"A": "1", "B": "two words", "C": "x", "D": "3"}
    assert [(f.code, f.location) for f in findings] == [("env-file-syntax", f"{path}:7:1")]
    assert read_env_file(str(tmp_path / "none.env"))[1][0].code == "file-missing"


def test_assemble_order(tmp_path: Path) -> None:
    path = tmp_path / "e.env"
    path.write_text("A=file\nB=file\n")
    environ, _ = assemble({"A": "process", "C": "process"}, [str(path)], ["B=flag"])
    assert environ == {"A": "file", "B": "flag", "C": "process"}
    with pytest.raises(EnvArgError):
        parse_env_arg("=x")
