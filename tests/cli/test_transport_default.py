"""A pool SGLang makes only when asked: `plan` says so, and `check` says "no pool" where the user looks.

One rule: for every release, `plan` without `--transport` flags the cuda_ipc pool it plans as an
opt-in exactly when `check` of the same launch without `--mm-feature-transport` finds no pool.
"""

from __future__ import annotations

import json

import pytest

from mmpool_cli.engines.sglang import versions


def _codes(run_line, argv: list[str], **kwargs) -> list[str]:
    result = run_line([*argv, "--format", "json"], **kwargs)
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    findings = data["findings"] if "findings" in data else [f for file in data["files"] for f in file["findings"]]
    return [f["code"] for f in findings]


@pytest.mark.parametrize("version", versions.known())
def test_plan_says_opt_in_exactly_where_check_finds_no_pool(run_line, version: str) -> None:
    plan = _codes(run_line, ["mmpool", "plan", "--sglang-version", version])
    launch = ["python", "-m", "sglang.launch_server", "--model-path", "m"]
    check = run_line(["mmpool", "check", "--sglang-version", version, "--format", "json", "--", *launch])
    no_pool = json.loads(check.stdout)["files"][0]["transport"] == "cpu"
    assert ("transport-opt-in" in plan) == no_pool, (version, plan)
    # asked for, it is the pool the launch makes: nothing to say
    assert "transport-opt-in" not in _codes(run_line, ["mmpool", "plan", "--sglang-version", version, "--transport", "cuda_ipc"])


def test_the_readme_first_plan_says_sglang_picks_cpu(run_line) -> None:
    result = run_line(["mmpool", "plan"])
    assert result.exit_code == 0
    text = " ".join(result.stdout.split())
    assert "transport-opt-in" in text
    assert "SGLang 0.5.23 picks cpu on one node unless --mm-feature-transport is set, and makes no pool" in text
    assert "--mm-feature-transport cuda_ipc" in result.stdout.splitlines()[-1]


def test_the_environment_variable_decides_as_check_reads_it(run_line) -> None:
    on = {"SGLANG_USE_CUDA_IPC_TRANSPORT": "1"}
    assert "transport-opt-in" not in _codes(run_line, ["mmpool", "plan", "--sglang-version", "0.5.12"], env=on)
    off = _codes(run_line, ["mmpool", "plan"], env={"SGLANG_USE_CUDA_IPC_TRANSPORT": "0"})
    assert "transport-opt-in" in off


def test_an_mmpool_config_without_a_transport_says_it_too(run_line, tmp_path) -> None:
    bare, asked = tmp_path / "bare.yaml", tmp_path / "asked.yaml"
    bare.write_text("pool:\n  size: 1GiB\n")
    asked.write_text("pool:\n  size: 1GiB\n  transport: cuda_ipc\n")
    assert "transport-opt-in" in _codes(run_line, ["mmpool", "validate", str(bare)])
    result = run_line(["mmpool", "validate", str(asked), "--format", "json"])
    assert "transport-opt-in" not in result.stdout


def test_check_says_no_pool_without_verbose(run_line) -> None:
    launch = ["python", "-m", "sglang.launch_server", "--model-path", "m", "--tp", "8"]
    result = run_line(["mmpool", "check", "--", *launch])
    assert result.exit_code == 0
    assert (
        "  plan: no pool: the transport resolves to cpu (SGLang's default on one node): no feature pool exists "
        "and nothing is reserved for one on GPU 0; --mm-feature-transport cuda_ipc makes one"
    ) in result.stdout.splitlines()
    verbose = run_line(["mmpool", "check", "-v", "--", *launch]).stdout
    assert verbose.count("no feature pool exists") == 1  # the finding itself, not twice
