"""Absurd numbers are refused: what no GPU can hold is an error, what no GPU can be is a usage error."""

from __future__ import annotations

import json

import pytest

from mmpool_cli.core.bounds import LARGEST_GPU_HBM_BYTES, context_problem, granularity_problem


def plan_json(run_line, *flags: str):
    result = run_line(["mmpool", "plan", "--format", "json", *flags])
    return result, json.loads(result.stdout) if result.stdout else None


def test_a_budget_larger_than_any_gpu_is_an_error_without_settings(run_line) -> None:
    result, data = plan_json(run_line, "--size", "1PiB")  # (10^30 bytes is past 2^63 - 1: a usage error)
    assert result.exit_code == 1
    assert data["status"] == "fail"
    assert data["settings"] is None  # no export line to copy
    found = next(f for f in data["findings"] if f["code"] == "budget-exceeds-gpu")
    assert found["severity"] == "error"
    assert "288 GiB (NVIDIA B300)" in found["message"]
    human = run_line(["mmpool", "plan", "--size", "1PiB"])
    assert "export " not in human.stdout


def test_the_largest_gpu_itself_still_plans(run_line) -> None:
    result, data = plan_json(run_line, "--size", f"{LARGEST_GPU_HBM_BYTES}")
    assert "budget-exceeds-gpu" not in [f["code"] for f in data["findings"]]


def test_a_budget_from_the_environment_larger_than_any_gpu_fails_validate(run_line) -> None:
    result = run_line(["mmpool", "validate", "--format", "json", "--env", "SGLANG_MM_FEATURE_CACHE_MB=99999999"])
    assert result.exit_code == 1
    env = json.loads(result.stdout)["files"][0]
    assert "budget-exceeds-gpu" in [f["code"] for f in env["findings"]]


def test_more_contexts_than_any_gpu_holds_is_an_error(run_line) -> None:
    result, data = plan_json(run_line, "--workers", "800")
    assert result.exit_code == 1
    assert "hbm-exceeds-gpu" in [f["code"] for f in data["findings"]]


def test_a_negative_base_gpu_is_sglangs_error(run_line) -> None:
    result, data = plan_json(run_line, "--base-gpu-id", "-1")
    assert result.exit_code == 1
    found = next(f for f in data["findings"] if f["code"] == "base-gpu-id-negative")
    assert "'base_gpu_id must be non-negative'" in found["message"]


@pytest.mark.parametrize(
    "flags",
    [
        ["--vmm-granularity", "3"],
        ["--vmm-granularity", "3MiB"],
        ["--vmm-granularity", "0"],
        ["--vmm-granularity", "2GiB"],
        ["--context-size", "0"],
        ["--context-size", "1TiB"],
        ["--workers", "1025"],
        ["--tp", "4097"],
        ["--dp", "100000"],
        ["--attn-dp-size", "5000"],
        ["--base-gpu-id", "5000"],
    ],
)
def test_values_no_gpu_can_have_are_usage_errors(run_line, flags: list[str]) -> None:
    result = run_line(["mmpool", "plan", *flags])
    assert result.exit_code == 2, result.stdout
    assert result.stdout == ""
    assert flags[0] in result.stderr


@pytest.mark.parametrize("command", [["plan"], ["probe"], ["simulate", "--feature-size", "1MiB", "--rate", "1"]])
@pytest.mark.parametrize("granularity", ["2MiB", "64KiB"])
def test_vmm_granularity_without_cuda_vmm_is_refused_not_ignored(
    run_line, command: list[str], granularity: str
) -> None:
    result = run_line(["mmpool", *command, "--vmm-granularity", granularity])
    assert result.exit_code == 2, result.stdout
    assert result.stdout == ""
    assert result.stderr == (
        "mmpool: error: --vmm-granularity sizes cuda_vmm's allocations; the cuda_ipc transport has no granularity: "
        "drop it, or add --transport cuda_vmm\n"
    )
    vmm = run_line(["mmpool", *command, "--vmm-granularity", granularity, "--transport", "cuda_vmm", "--format", "json"])
    assert "--vmm-granularity sizes" not in vmm.stderr


@pytest.mark.parametrize("flags", [["--gpu-memory", "0"], ["--context-size", "0"], ["--vmm-granularity", "3"]])
def test_check_refuses_the_same_values(run_line, flags: list[str]) -> None:
    result = run_line(["mmpool", "check", *flags, "--", "sglang", "serve", "m"])
    assert result.exit_code == 2
    assert flags[0] in result.stderr


def test_granularity_and_context_bounds() -> None:
    assert granularity_problem(2 * 2**20) is None
    assert granularity_problem(64 * 2**10) is None
    assert "power of two" in (granularity_problem(3 * 2**20) or "")
    assert granularity_problem(2**10) is not None
    assert context_problem(552_402_944) is None
    assert context_problem(0) is not None


@pytest.mark.parametrize(
    "argv",
    [
        ["plan", "--workers", "٤"],  # ARABIC-INDIC DIGIT FOUR: int() reads it as 4
        ["plan", "--tp", "１"],  # FULLWIDTH DIGIT ONE
        ["plan", "--base-gpu-id", "٠"],
        ["plan", "--workers", "1_0"],
        ["plan", "--model", "qwen2.5-vl", "--image", "64x64", "--max-frames", "٤"],
        ["plan", "--model", "qwen2.5-vl", "--image", "64x64", "--page-size", "٤"],
        ["simulate", "--feature-size", "1MiB", "--rate", "1", "--requests", "٤"],
        ["simulate", "--feature-size", "1MiB", "--rate", "1", "--seed", "٤"],
    ],
)
def test_every_integer_option_takes_ascii_digits_only_as_sizes_do(run_line, argv: list[str]) -> None:
    result = run_line(["mmpool", *argv])
    assert result.exit_code == 2, result.output
    assert result.stdout == ""
    assert "ASCII digits" in result.stderr or "underscores are not accepted" in result.stderr, result.stderr
    size = run_line(["mmpool", "plan", "--size", "٤GiB"])  # the rule sizes already follow
    assert size.exit_code == 2


def test_ascii_integers_still_work(run_line) -> None:
    result, data = plan_json(run_line, "--workers", "4", "--tp", " 8", "--base-gpu-id", "0")
    assert result.exit_code == 0, result.output
    assert (data["workers"], data["tp_size"]) == (4, 8)


@pytest.mark.parametrize("value", ["0", "-1", "3601", "nan"])
def test_probe_timeout_says_more_than_0(run_line, value: str) -> None:
    result = run_line(["mmpool", "probe", "--timeout", value])
    assert result.exit_code == 2
    assert "more than 0 and at most 3600 seconds" in result.stderr
    assert "between 0 and" not in result.stderr
