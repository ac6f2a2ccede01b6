"""Messages that say what was wrong in the user's own terms (issue 36, item 18), one rule for each input."""

from __future__ import annotations

import json
from pathlib import Path

from mmpool_cli.engines.sglang.env_vars import env_findings

LAUNCH = ["python", "-m", "sglang.launch_server", "--model-path", "m"]


def _trace(tmp_path: Path, *events: str) -> str:
    path = tmp_path / "t.jsonl"
    path.write_text("".join(e + "\n" for e in events))
    return str(path)


def test_trace_times_are_written_as_decimals_not_exponents(run_line, tmp_path: Path) -> None:
    later = '{"t": 2e-8, "op": "alloc", "id": "a", "bytes": 10}'
    earlier = '{"t": 1e-8, "op": "alloc", "id": "b", "bytes": 10}'
    result = run_line(["mmpool", "simulate", "--trace", _trace(tmp_path, later, earlier), "--transport", "cuda_ipc"])
    assert result.exit_code == 2
    assert "t=0.00000001 s comes before the previous event's t=0.00000002 s" in result.stderr
    huge = _trace(tmp_path, '{"t": 1e400, "op": "alloc", "id": "a", "bytes": 10}')
    result = run_line(["mmpool", "simulate", "--trace", huge, "--transport", "cuda_ipc"])
    assert result.stderr.rstrip().endswith("t must be from 0 to 1000000000 seconds, not 1e400"), result.stderr


def test_a_hexadecimal_size_is_named_and_given_in_decimal(run_line) -> None:
    result = run_line(["mmpool", "plan", "--size", "0x10"])
    assert result.exit_code == 2
    assert "invalid size '0x10': hexadecimal is not accepted: sizes are decimal; did you mean 16?" in result.stderr


def test_a_gpu_id_is_not_a_count_of_ranks(run_line, tmp_path: Path) -> None:
    said = "4097: no node has a GPU 4097; mmpool plans GPU ids up to 4096"
    assert said in run_line(["mmpool", "plan", "--base-gpu-id", "4097"]).stderr
    check = run_line(["mmpool", "check", "--", *LAUNCH, "--base-gpu-id", "4097"])
    assert f"--base-gpu-id {said}" in check.stdout and "ranks" not in check.stdout
    config = tmp_path / "c.yaml"
    config.write_text("parallel:\n  base_gpu_id: 4097\n")
    assert f"parallel.base_gpu_id: {said}" in run_line(["mmpool", "validate", str(config)]).stdout


def test_a_config_counts_with_the_bounds_of_the_flags(run_line, tmp_path: Path) -> None:
    config = tmp_path / "c.yaml"
    config.write_text("pool:\n  tokenizer_workers: 1025\nparallel:\n  tp: 4097\n")
    out = run_line(["mmpool", "validate", str(config)]).stdout
    assert "pool.tokenizer_workers: 1025: mmpool plans at most 1024 tokenizer workers" in out
    assert "parallel.tp: 4097: mmpool plans at most 4096 ranks" in out
    assert "1025: mmpool plans at most 1024 tokenizer workers" in run_line(["mmpool", "plan", "--workers", "1025"]).stderr


def test_a_binary_env_file_is_not_called_yaml(run_line, tmp_path: Path) -> None:
    env = tmp_path / "prod.env"
    env.write_bytes(b"A=1\n\0\0")
    out = run_line(["mmpool", "validate", "--env-file", str(env)]).stdout
    assert "it is binary, not a dotenv file (KEY=VALUE lines); pass the environment file" in out
    assert "YAML" not in out


def test_trace_to_a_directory_says_so(run_line, tmp_path: Path) -> None:
    result = run_line(["mmpool", "trace", "--model", "qwen2.5-vl", "examples/server.log", "-o", str(tmp_path)])
    assert result.exit_code == 2
    assert f"-o {tmp_path}: is a directory; give the trace a file name, e.g. -o {tmp_path}/trace.jsonl" in result.stderr
    assert "overwrites" not in result.stderr


def test_a_recycle_interval_sglang_cannot_run_with_is_said_as_check_says_it(run_line) -> None:
    for value in ("0", "nan", "1e300"):
        env = {"SGLANG_MM_ITEM_MEM_POOL_RECYCLE_INTERVAL_SEC": value}
        result = run_line(["mmpool", "simulate", "--trace", "examples/trace.jsonl"], env=env)
        assert result.exit_code == 2
        (said,) = [f.message for f in env_findings(env) if f.code.startswith("env-recycle-")]
        assert result.stderr == f"mmpool: error: {said}\n"


def test_no_share_has_no_split_to_call_whole(run_line) -> None:
    out = run_line(["mmpool", "plan", "--size", "0"]).stdout
    assert "unused remainder       n/a\n" in out
    data = json.loads(run_line(["mmpool", "plan", "--size", "0", "--format", "json"]).stdout)
    assert data["unused_bytes"] is None


def test_trace_errors_name_their_codes_as_json_does(run_line, tmp_path: Path) -> None:
    body = '{"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "https://x/a.png"}}]}]}'
    log = tmp_path / "bodies.jsonl"
    log.write_text(body + "\nnot json\n")
    human = run_line(["mmpool", "trace", "--model", "qwen2.5-vl", "--from-format", "openai", str(log)]).stderr
    result = run_line(["mmpool", "trace", "--model", "qwen2.5-vl", "--from-format", "openai", str(log), "--format", "json"])
    data = json.loads(result.stdout or result.stderr)
    for finding in data["findings"]:
        assert f"{finding['where']}: error [{finding['code']}] {finding['message']}" in human
    assert {f["code"] for f in data["findings"]} == {"traffic-image-unsized", "traffic-body-line"}


def test_one_client_is_one_client(run_line) -> None:
    argv = ["mmpool", "simulate", "--feature-size", "10MiB", "--size", "64MiB", "--duration", "1", "--concurrency", "1"]
    out = run_line(argv).stdout
    assert "1 client, first requests" in " ".join(out.split())
    assert "1 clients" not in out
