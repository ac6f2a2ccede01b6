"""Huge and long inputs get the same clear, short finding as any bad value: no internal error, no huge line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

BIG = 3 * 2**20  # a 3 MB value
LONGEST_LINE = 1_000


def _lines_are_short(text: str) -> None:
    longest = max((len(line) for line in text.splitlines()), default=0)
    assert longest < LONGEST_LINE, f"a {longest:,}-character line"


def _strings_are_short(value: object) -> None:
    if isinstance(value, str):
        assert len(value) < LONGEST_LINE, f"a {len(value):,}-character string"
    elif isinstance(value, dict):
        for item in value.values():
            _strings_are_short(item)
    elif isinstance(value, list):
        for item in value:
            _strings_are_short(item)


def _validate(run_line, files: list[str], env: list[str], fmt: str = "human"):
    args = ["mmpool", "validate", "--no-process-env", "--format", fmt, *files]
    for item in env:
        args += ["--env", item]
    return run_line(args)


@pytest.mark.parametrize(
    ("value", "code"),
    [
        ("9" * 4_300, "env-budget-too-large"),  # int() reads it; the pool's bytes overflow 64 bits
        ("9" * 4_301, "env-budget-invalid"),  # int() refuses it: SGLang warns and uses its default
        ("x" * BIG, "env-budget-invalid"),
        (str(2**63 // 2**20), "env-budget-too-large"),
    ],
)
@pytest.mark.parametrize("fmt", ["human", "json"])
def test_a_huge_budget_in_the_environment(run_line, tmp_path: Path, value: str, code: str, fmt: str) -> None:
    ok = tmp_path / "c.yaml"
    ok.write_text("tp-size: 2\n")
    result = _validate(run_line, [str(ok)], [f"SGLANG_MM_FEATURE_CACHE_MB={value}"], fmt)
    assert result.exit_code == 1, result.output[:2000]
    assert code in result.stdout
    if value == "9" * 4_301:
        assert "has 4,301 digits, more than Python's int() reads" in result.stdout
    if fmt == "human":
        _lines_are_short(result.stdout)
    else:
        _strings_are_short(json.loads(result.stdout))
        findings = json.loads(result.stdout)["files"][0]["findings"]
        assert [f["severity"] for f in findings if f["code"] == code] == ["error"]


def test_a_long_recycle_interval_is_quoted_short(run_line, tmp_path: Path) -> None:
    ok = tmp_path / "c.yaml"
    ok.write_text("tp-size: 2\n")
    result = _validate(run_line, [str(ok)], [f"SGLANG_MM_ITEM_MEM_POOL_RECYCLE_INTERVAL_SEC={'x' * BIG}"])
    assert "env-recycle-invalid" in result.stdout
    _lines_are_short(result.stdout)


@pytest.mark.parametrize(
    ("text", "code"),
    [
        (f"tp-size: {'x' * BIG}\n", "flag-bad-value"),
        (f"tp-size: {'9' * 4_000}\n", "flag-bad-value"),  # beyond 64 bits, below Python's digit limit
        (f"tokenizer-worker-num: -{'9' * 4_000}\n", "flag-bad-value"),
        (f"? {'k' * BIG}\n: 1\n", "unrecognized-argument"),  # YAML's explicit key: no 1 024-character limit
        (f"mm-feature-transport: {'c' * BIG}\n", "flag-bad-value"),
        (f"pool:\n  size: {'9' * 4_300}\n", "config-invalid-value"),
        (f"pool:\n  size: '{'9' * BIG}'\n", "config-invalid-value"),
        (f"parallel:\n  tp: {'9' * 4_300}\n", "config-invalid-value"),
        (f"pool:\n  tokenizer_workers: {'9' * 4_300}\n", "config-invalid-value"),
        (f"workload:\n  feature_sizes: [{'9' * 4_300}]\n", "config-invalid-value"),
        (f"pool:\n  ? {'k' * BIG}\n  : 1\n", "config-unknown-key"),
        (f"? {'k' * (BIG // 2)}\n: 1\n? {'k' * (BIG // 2)}\n: 2\n", "yaml-duplicate-key"),
    ],
)
def test_a_huge_value_in_a_file(run_line, tmp_path: Path, text: str, code: str) -> None:
    path = tmp_path / "c.yaml"
    path.write_text(text)
    result = _validate(run_line, [str(path)], [])
    assert result.exit_code == 1, result.output[:2000]
    assert f"[{code}]" in result.stdout
    _lines_are_short(result.stdout)


def test_a_huge_flag_on_the_launch_command(run_line) -> None:
    argv = ["python", "-m", "sglang.launch_server", "--tp-size", "9" * 4_300, "--mm-feature-transport", "cuda_ipc"]
    result = run_line(["mmpool", "check", "--no-process-env", "--no-probe-pidfd", "--", *argv])
    assert result.exit_code == 1, result.output[:2000]
    assert "flag-bad-value" in result.stdout
    _lines_are_short(result.stdout)


@pytest.mark.parametrize("flag", ["--tp", "--workers", "--dp", "--attn-dp-size", "--base-gpu-id"])
@pytest.mark.parametrize("value", ["9" * 4_300, "9" * 4_301, str(2**63)])
def test_a_huge_integer_flag_is_a_short_usage_error(run_line, flag: str, value: str) -> None:
    result = run_line(["mmpool", "plan", flag, value])
    assert result.exit_code == 2, result.output[:2000]
    assert result.stderr.startswith("mmpool: error: ") or "Invalid value" in result.output
    _lines_are_short(result.output)
