"""`mmpool check --from FILE`: an SGLang launch held to its traffic, by tune's own scoring of today's launch
(vLLM launches: test_check_traffic_vllm.py)."""

from __future__ import annotations

import pytest

LAUNCH = ["sglang", "serve", "--model-path", "examples/qwen2.5-vl-7b", "--max-total-tokens", "2048"]
CHATS = "examples/traffic/chats.jsonl"


@pytest.mark.parametrize(
    ("flags", "said"),
    [
        (["--max-fallback", "0"], "--max-fallback holds the launch to its traffic: add --from FILE"),
        (["--min-prefix-hit", "30"], "--min-prefix-hit holds the launch to its traffic: add --from FILE"),
        (["--from", CHATS, "--max-fallback", "-1"], "--max-fallback -1: a count of features, 0 or more"),
        (["--from", CHATS, "--min-prefix-hit", "101"], "--min-prefix-hit 101: a percentage from 0 to 100"),
        (["--from", CHATS, "--min-prefix-hit", "lots"], "--min-prefix-hit lots: a percentage from 0 to 100"),
    ],
)
def test_bounds_without_traffic_or_out_of_range_are_one_line_usage_errors(run_line, flags, said) -> None:
    result = run_line(["mmpool", "check", *flags, "--", *LAUNCH])
    assert result.exit_code == 2, result.output
    assert result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"mmpool: error: {said}"), result.stderr


@pytest.mark.parametrize(("pool_mb", "kv"), [("2", "512"), ("1024", "2048"), ("6", "4096")])
def test_check_says_what_tune_scores_for_todays_launch(run_line, monkeypatch, pool_mb: str, kv: str) -> None:
    import json
    import re

    monkeypatch.setenv("SGLANG_MM_FEATURE_CACHE_MB", pool_mb)
    monkeypatch.setenv("SGLANG_VLM_CACHE_SIZE_MB", "1")
    launch = [*LAUNCH[:-1], kv, "--mm-feature-transport", "cuda_ipc", "--tokenizer-worker-num", "2"]
    checked = run_line(["mmpool", "check", "-v", "--format", "json", "--from", CHATS, "--", *launch])
    assert checked.exit_code == 0, checked.output
    findings = json.loads(checked.stdout)["files"][-1]["findings"]
    said = next(f["message"] for f in findings if f["code"] == "tune-measures")
    tuned = run_line(
        ["mmpool", "tune", "--model", LAUNCH[3], "--from", CHATS, "--max-total-tokens", kv, "--workers", "2"]
        + ["--format", "json", "--exit-zero"]
    )
    assert tuned.exit_code == 0, tuned.output
    data = json.loads(tuned.stdout)
    today = data["rows"][data["today"]]
    m = today["measures"]
    assert today["values"] == {"kv": int(kv), "pool": int(pool_mb), "embedding": 1}
    numbers = [int(n.replace(",", "")) for n in re.findall(r"\d[\d,]*", said.split("features fall back")[0])]
    assert numbers[-1] == m["fallback_items"]
    assert f"serves {m['prefix_served_tokens']:,} of {m['prompt_tokens']:,} prompt tokens" in said
    assert f"{m['encoder_tokens']:,} encoder tokens computed; {m['kv_tokens']:,} KV tokens" in said
    assert f"({m['requests']:,} requests)" in said


def test_a_bound_the_launch_breaks_fails_the_check_and_exec_never_runs(run_line, monkeypatch) -> None:
    monkeypatch.setenv("SGLANG_MM_FEATURE_CACHE_MB", "2")
    launch = [*LAUNCH, "--mm-feature-transport", "cuda_ipc"]
    result = run_line(["mmpool", "check", "--from", CHATS, "--max-fallback", "0", "--exec", "--", *launch])
    assert result.exit_code == 1
    assert "error [tune-fallback-over]" in result.stderr  # --exec: the report goes to stderr
    held = run_line(["mmpool", "check", "--from", CHATS, "--max-fallback", "1000", "--", *launch])
    assert held.exit_code == 0, held.output


def test_a_launch_without_a_pool_or_a_kv_capacity_is_refused_in_one_line(run_line) -> None:
    no_pool = run_line(["mmpool", "check", "--from", CHATS, "--", *LAUNCH])
    assert no_pool.exit_code == 2 and "makes no feature pool" in no_pool.stderr and no_pool.stdout == ""
    no_kv = run_line(["mmpool", "check", "--from", CHATS, "--", *LAUNCH[:-2], "--mm-feature-transport", "cuda_ipc"])
    assert no_kv.exit_code == 2 and no_kv.stdout == "", no_kv.output
    assert no_kv.stderr.strip().splitlines() == [
        "mmpool: error: --from: the launch gives no --max-total-tokens, so its KV capacity is unknown offline; add "
        "the max_total_num_tokens SGLang prints at start-up to the launch"
    ]
