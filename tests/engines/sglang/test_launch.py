"""`mmpool check`: the launch command resolved as SGLang 0.5.23 would, and --exec only after a pass."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from mmpool_cli.engines.sglang.launch import Assumptions, check_launch, split_launcher
from mmpool_cli.errors import MmpoolError

LAUNCH = ["python", "-m", "sglang.launch_server", "--model-path", "m"]
QWEN_HOPPER = Assumptions(hf_model_type="qwen3_vl", sm90=True, gpu_memory=141 * 2**30)


def run(extra: list[str], environ: dict[str, str] | None = None, assume: Assumptions = Assumptions(), base=LAUNCH):
    result = check_launch(base + extra, environ or {}, assume)
    return result, [f.code for f in result.findings if f.severity.value != "info"]


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["python", "-m", "sglang.launch_server"], ("launch_server", 3)),
        (["python3", "-m", "sglang.launch_server"], ("launch_server", 3)),
        (["/usr/bin/python3.11", "-u", "-m", "sglang.launch_server"], ("launch_server", 4)),
        (["sglang", "serve"], ("serve", 2)),
        (["/opt/venv/bin/sglang", "serve"], ("serve", 2)),
    ],
)
def test_launchers(argv: list[str], expected: tuple[str, int]) -> None:
    assert split_launcher(argv) == expected


@pytest.mark.parametrize("argv", [[], ["bash", "-c", "x"], ["python", "-m", "vllm"], ["sglang", "bench"]])
def test_other_commands_are_usage_errors(argv: list[str]) -> None:
    with pytest.raises(MmpoolError):
        split_launcher(argv)


def test_unset_transport_on_one_node_is_cpu() -> None:
    result, bad = run([])
    assert result.transport == "cpu"
    assert result.plan is None
    assert bad == []
    assert {"no-pool", "assumption-model"} <= {f.code for f in result.findings}


def test_explicit_cuda_ipc_plans_the_pool() -> None:
    result, bad = run(["--tp", "8", "--tokenizer-worker-num", "4", "--mm-feature-transport", "cuda_ipc"])
    assert bad == []
    assert result.plan is not None
    assert result.plan.per_worker_bytes == 2**28
    hbm = next(f for f in result.findings if f.code == "hbm-base-gpu")
    assert "1,073,741,824 B (1 GiB) for 4 pool(s) on GPU 0" in hbm.message


def test_vmm_hbm_counts_the_positional_embeds_pools_too() -> None:
    launch = ["--tp", "8", "--tokenizer-worker-num", "4", "--mm-feature-transport", "cuda_vmm"]
    result, _ = run(launch, assume=Assumptions(gpu_memory=10 * 2**30))
    assert result.plan is not None and result.plan.hbm is not None
    hbm = next(f for f in result.findings if f.code == "hbm-base-gpu")
    # 4 x 256 MiB (VMM) + 4 contexts = 3,283,353,600 B; the positional-embeds pools add 4 x 256 MiB
    assert "3,283,353,600 B" in hbm.message
    assert "at most 4,357,095,424 B" in hbm.message
    assert "40.5% of its 10,737,418,240 B (10 GiB)" in hbm.message  # the share of the larger figure
    # on two nodes SGLang's positional-embeds transport is off: one figure
    result, _ = run([*launch, "--nnodes", "2"], assume=Assumptions(gpu_memory=10 * 2**30))
    assert result.plan is not None and result.plan.hbm is not None
    assert result.plan.hbm.max_total_bytes == result.plan.hbm.total_bytes
    assert "at most" not in next(f for f in result.findings if f.code == "hbm-base-gpu").message


@pytest.mark.parametrize(
    ("extra", "code"),
    [
        (["--mm-feature-transport", "cuda_ipc", "--nnodes", "2"], "transport-layout"),
        (["--mm-feature-transport", "cuda_vmm", "--pp-size", "2"], "transport-layout"),
        (["--keep-mm-feature-on-device"], "flag-not-in-release"),
        (["--tp-size", "x"], "flag-bad-value"),
        (["--config=c.yaml"], "config-not-merged"),
        (["--mm-feature-transport", "cuda_ipc", "--tokenizer-worker-num", "0"], "workers-not-positive"),
    ],
)
def test_launch_errors(extra: list[str], code: str) -> None:
    assert code in run(extra)[1]


@pytest.mark.parametrize("transport", [[], ["--mm-feature-transport", "cpu"], ["--mm-feature-transport", "cuda_vmm"]])
@pytest.mark.parametrize("workers", ["0", "-1"])
def test_tokenizer_workers_below_one_fail_for_every_transport(transport: list[str], workers: str) -> None:
    result = check_launch([*LAUNCH, *transport, "--tokenizer-worker-num", workers], {}, Assumptions())
    refused = [f for f in result.findings if f.code == "workers-not-positive"]
    assert len(refused) == 1
    assert "'Tokenizer worker num must >= 1'" in refused[0].message
    assert refused[0].location == f"argv[{len(LAUNCH) + len(transport) + 1}]"


def test_startup_refusals_are_located_at_their_flag_without_a_pool() -> None:
    result = check_launch([*LAUNCH, "--base-gpu-id", "-1", "--tp", "3", "--nnodes", "2"], {}, Assumptions())
    located = {f.code: f.location for f in result.findings if f.severity.value == "error"}
    assert located["base-gpu-id-negative"] == f"argv[{len(LAUNCH) + 1}]"
    assert located["tp-not-divisible-by-nodes"] == f"argv[{len(LAUNCH) + 5}]"


def test_model_path_required() -> None:
    assert run([], base=["python", "-m", "sglang.launch_server"])[1] == ["model-path-missing"]
    assert run(["m", "--tp", "2"], base=["sglang", "serve"])[1] == []
    assert run(["--model-type", "llm", "--model=m"], base=["sglang", "serve"])[1] == []


def test_serve_needs_model_on_the_command_line(tmp_path: Path) -> None:
    cfg = tmp_path / "c.yaml"
    cfg.write_text("model-path: m\n")
    assert run(["--config", str(cfg)], base=["sglang", "serve"])[1] == ["model-path-missing"]
    assert run(["--config", str(cfg)], base=["python", "-m", "sglang.launch_server"])[1] == []


def test_legacy_env_transport() -> None:
    result, bad = run([], {"SGLANG_USE_CUDA_IPC_TRANSPORT": "1"})
    assert result.transport == "cuda_ipc"
    assert bad == ["env-legacy-transport"]
    result, bad = run(["--mm-feature-transport", "cuda_ipc"], {"SGLANG_USE_CUDA_IPC_TRANSPORT": "0"})
    assert "env-legacy-transport-conflict" in bad


def test_encoder_only_demotes_to_cpu() -> None:
    result, bad = run(["--encoder-only", "--mm-feature-transport", "cuda_ipc"])
    assert result.transport == "cpu"
    assert bad == ["encoder-only-cpu"]


def test_qwen3_vl_override() -> None:
    result, _ = run(["--max-running-requests", "512"], assume=QWEN_HOPPER)
    assert result.transport == "cuda_ipc"
    assert result.plan is not None and result.plan.sglang_mm_feature_cache_mb == 3072
    result, _ = run(["--max-running-requests", "512"], {"SGLANG_MM_FEATURE_CACHE_MB": "2048"}, QWEN_HOPPER)
    assert result.plan is not None and result.plan.sglang_mm_feature_cache_mb == 2048
    assert run(["--nnodes", "2"], assume=QWEN_HOPPER)[0].transport == "cpu"
    assert run(["--mm-preprocess-cache-size-mb", "64"], assume=QWEN_HOPPER)[0].transport == "cpu"
    small = Assumptions(hf_model_type="qwen3_vl", sm90=True, gpu_memory=40 * 2**30)
    assert run([], assume=small)[0].transport == "cpu"
    assert "assumption-gpu" in run([], assume=Assumptions(hf_model_type="qwen3_vl"))[1]


def test_expandable_segments_probe(monkeypatch: pytest.MonkeyPatch) -> None:
    import mmpool_cli.engines.sglang.pidfd as pidfd

    env = {"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"}
    ipc = ["--mm-feature-transport", "cuda_ipc"]
    assert "pidfd-getfd-needed" in run(ipc, env)[1]
    monkeypatch.setattr(pidfd, "check_pidfd_getfd", lambda: pidfd.PidfdCheck(False, "refused (EPERM)", 1))
    assert "pidfd-getfd-refused" in run(ipc, env, Assumptions(probe_pidfd=True))[1]


# --- the command ----------------------------------------------------------------------------


def test_cli_exit_codes_and_json(run_line) -> None:
    ok = run_line(["mmpool", "check", "--format", "json", "--", *LAUNCH])
    assert ok.exit_code == 0, ok.output
    data = json.loads(ok.stdout)
    assert data["command"] == "check"
    assert data["launch"] == LAUNCH
    assert data["files"][0]["transport"] == "cpu"
    bad = run_line(["mmpool", "check", "--", *LAUNCH, "--mm-feature-transport", "cuda_ipc", "--nnodes", "2"])
    assert bad.exit_code == 1
    assert "argv[6]: error [transport-layout]" in bad.stdout
    usage = run_line(["mmpool", "check", "--", "bash", "-c", "true"])
    assert usage.exit_code == 2
    assert usage.stderr.count("\n") == 1


def test_cli_github(run_line) -> None:
    result = run_line(["mmpool", "check", "--format", "github", "--", *LAUNCH, "--tp-size", "x"])
    assert result.exit_code == 1
    assert "::error title=mmpool flag-bad-value::argv[6]: SGLang refuses this" in result.stdout


def test_exec_refuses_env_overrides(run_line) -> None:
    result = run_line(["mmpool", "check", "--exec", "--env", "A=1", "--", *LAUNCH])
    assert (result.exit_code, result.stdout) == (2, "")
    assert result.stderr == (
        "mmpool: error: --exec runs the launch with mmpool's own environment, so --env, --env-file and "
        "--no-process-env would check a different one: export the variables instead\n"
    )


@pytest.fixture
def stand_in(tmp_path: Path) -> tuple[dict[str, str], Path]:
    """A fake `sglang` first on PATH that records its argv and one variable into a marker file."""
    marker = tmp_path / "ran"
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    exe = bin_dir / "sglang"
    exe.write_text(f'#!/bin/sh\necho "$@ $SGLANG_MM_FEATURE_CACHE_MB" > {marker}\n')
    exe.chmod(0o755)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SGLANG_", "SGL_"))}
    env["PATH"] = f"{bin_dir}{os.pathsep}{env['PATH']}"
    env["SGLANG_MM_FEATURE_CACHE_MB"] = "2048"
    return env, marker


def _mmpool(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "mmpool_cli", *args], capture_output=True, text=True, env=env, check=False
    )


def test_exec_runs_the_launch_after_a_pass(stand_in) -> None:
    env, marker = stand_in
    cmd = ["sglang", "serve", "m", "--mm-feature-transport", "cuda_ipc"]
    result = _mmpool(["check", "--exec", "--", *cmd], env)
    assert result.returncode == 0, result.stderr
    assert marker.read_text().split() == ["serve", "m", "--mm-feature-transport", "cuda_ipc", "2048"]
    assert "mmpool check: OK" in result.stderr
    assert result.stdout == ""


def test_exec_does_not_run_after_a_failure(stand_in) -> None:
    env, marker = stand_in
    result = _mmpool(
        ["check", "--exec", "--", "sglang", "serve", "m", "--mm-feature-transport", "cuda_ipc", "--nnodes", "2"], env
    )
    assert result.returncode == 1
    assert not marker.exists()
    env["SGLANG_MM_FEATURE_CACHE_MB"] = "1GB"  # a warning-free error in the environment also stops it
    assert _mmpool(["check", "--exec", "--", "sglang", "serve", "m"], env).returncode == 1
    assert not marker.exists()


def test_exec_strict_stops_on_warnings(stand_in) -> None:
    env, marker = stand_in
    env["SGLANG_USE_CUDA_IPC_TRANSPORT"] = "1"
    result = _mmpool(["check", "--exec", "--strict", "--", "sglang", "serve", "m"], env)
    assert result.returncode == 1
    assert not marker.exists()


@pytest.mark.parametrize(
    ("argv", "word"),
    [
        (["python", "-m", "sglang.launch_server", "--help"], "--help"),
        (["python", "-m", "sglang.launch_server", "-h"], "-h"),
        (["python", "-m", "sglang.launch_server", "--hel"], "--hel"),  # argparse's unique prefix
        # argparse refuses unknown words only once it parsed them all: the help comes first
        (["python", "-m", "sglang.launch_server", "--tp-size", "2", "--bogus", "3", "-h"], "-h"),
        # sglang serve looks for the exact words before parsing anything (cli/serve.py)
        (["sglang", "serve", "--help"], "--help"),
        (["sglang", "serve", "m", "--tp-size", "x", "-h"], "-h"),
    ],
)
def test_help_is_printed_and_exits_0_without_a_pool(argv: list[str], word: str) -> None:
    result = check_launch(argv, {}, Assumptions())
    assert not result.fails() and result.plan is None and result.transport == "cpu"
    helped = [f for f in result.findings if f.code == "launch-help"]
    assert len(helped) == 1 and f"at {word!r}" in helped[0].message
    assert helped[0].location == f"argv[{argv.index(word)}]"


@pytest.mark.parametrize(
    ("extra", "code"),
    [
        (["--tp-size", "x", "-h"], "flag-bad-value"),  # argparse fails on the value before the help
        (["--tp-size", "-h"], "flag-bad-value"),  # 'expected one argument'
        (["--config", "missing.yaml", "--help"], "file-missing"),  # merged before parsing
    ],
)
def test_an_error_before_the_help_fails_first(extra: list[str], code: str, tmp_path: Path) -> None:
    result = check_launch(["python", "-m", "sglang.launch_server", *extra], {}, Assumptions(), cwd=str(tmp_path))
    assert result.fails() and code in [f.code for f in result.findings]
    assert "launch-help" not in [f.code for f in result.findings]


def test_check_says_help_where_the_plan_would_be(run_line) -> None:
    result = run_line(["mmpool", "check", "--", "python", "-m", "sglang.launch_server", "--help"])
    assert result.exit_code == 0, result.output
    assert "  plan: no pool: SGLang prints its help at '--help' and exits 0" in result.stdout
