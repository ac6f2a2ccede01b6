"""``mmpool tune --engine vllm``: the command line (the rows themselves: tests/engines/vllm/test_tune.py)."""

from __future__ import annotations

import json

import pytest

MODEL = "examples/qwen2.5-vl-7b"  # Qwen2.5-VL-7B's shape: 28 layers, 4 KV heads of 128, bfloat16
EXAMPLE = "examples/traffic/vllm-chats.jsonl"
BASE = ["mmpool", "tune", "--engine", "vllm", "--model", MODEL, "--from", EXAMPLE]
NO_VIDEO = ["--limit-mm-per-prompt", '{"video": 0}']


def test_the_shipped_example_finds_a_better_split_and_says_what_it_buys(run_line) -> None:
    result = run_line([*BASE, "--num-gpu-blocks-override", "400", *NO_VIDEO])
    assert result.exit_code == 1, result.output  # today's launch leaves encoder work a split saves
    out = result.stdout
    assert out.startswith("mmpool tune: BETTER SPLIT  (vLLM 0.34.0, examples/traffic/vllm-chats.jsonl)\n")
    assert "[today's launch: 400 KV blocks × 917,504 B + the encoder cache's 16,384 tokens × 7,168 B" in out
    assert "  --num-gpu-blocks-override 225\n  --max-num-batched-tokens 38748\n" in out
    assert "KV blocks  encoder size tokens  decode pool bytes" in out
    assert "vllm-tune-fixed: the GPU decode pool has nothing to decide" in out
    assert run_line([*BASE, "--num-gpu-blocks-override", "400", *NO_VIDEO, "--exit-zero"]).exit_code == 0


def test_json_names_vllms_memories_and_every_row(run_line) -> None:
    result = run_line([*BASE, "--num-gpu-blocks-override", "400", *NO_VIDEO, "--format", "json", "--points", "3"])
    data = json.loads(result.stdout)
    assert (data["schema_version"], data["status"], data["engine"]) == (1, "fail", "vLLM 0.34.0")
    assert [m["name"] for m in data["memories"]] == ["kv", "encoder", "decode_pool"]
    assert [m["setting"] for m in data["memories"]] == [
        "--num-gpu-blocks-override",
        "--max-num-batched-tokens",
        "--mm-ipc-gpu-memory-gb",
    ]
    today = data["rows"][data["today"]]
    assert today["values"] == {"kv": 400, "encoder": 16384, "decode_pool": 0}
    assert all(sum(r["bytes"].values()) <= data["budget_bytes"] for r in data["rows"])
    assert data["rows"][data["recommended"]]["on_front"]


def test_videos_allowed_leave_one_split_and_today_is_it(run_line) -> None:
    result = run_line([*BASE, "--num-gpu-blocks-override", "3000"])
    assert result.exit_code == 0, result.output
    assert "mmpool tune: OK" in result.stdout and "encoder cache has nothing to decide" in result.stdout


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        ([], "the memory to divide is not known: give --num-gpu-blocks-override N"),
        (["--hidden-size", "3584", "--num-gpu-blocks-override", "9"], "--hidden-size is for --engine sglang"),
        (["--max-total-tokens", "9"], "--max-total-tokens is for --engine sglang"),
        (["--num-gpu-blocks-override", "1"], "--num-gpu-blocks-override 1: from 2"),
        (["--num-gpu-blocks-override", "400", "--budget", "1MiB"], "leave no split two KV blocks"),
        (["--num-gpu-blocks-override", "400", "--encoder-window", "0"], "--encoder-window 0: give 1 to"),
    ],
)
def test_bad_input_is_one_line(run_line, argv: list[str], message: str) -> None:
    result = run_line([*BASE, *argv])
    assert result.exit_code == 2 and result.stdout == ""
    assert message in result.stderr and result.stderr.count("\n") == 1


def test_no_budget_is_said_before_the_traffic_is_read(run_line, tmp_path) -> None:
    import os

    fifo = tmp_path / "never-written"
    os.mkfifo(fifo)  # a FIFO is refused as the traffic is read: the budget's refusal comes before any reading
    result = run_line(["mmpool", "tune", "--engine", "vllm", "--model", MODEL, "--from", str(fifo)])
    assert result.exit_code == 2 and "the memory to divide is not known" in result.stderr


def test_a_family_name_gives_no_kv_bytes(run_line) -> None:
    argv = ["mmpool", "tune", "--engine", "vllm", "--model", "qwen2.5-vl", "--from", EXAMPLE]
    result = run_line([*argv, "--num-gpu-blocks-override", "400"])
    assert result.exit_code == 2 and "--model DIR" in result.stderr


def test_a_vllm_flag_needs_the_engine(run_line) -> None:
    result = run_line(["mmpool", "tune", "--model", MODEL, "--from", EXAMPLE, "--num-gpu-blocks-override", "400"])
    assert result.exit_code == 2 and "--num-gpu-blocks-override is a vLLM flag" in result.stderr


def test_a_trace_is_for_sglang(run_line) -> None:
    result = run_line([*BASE, "--num-gpu-blocks-override", "400", "--trace", "x.jsonl"])
    assert result.exit_code == 2 and "--trace is for --engine sglang: vLLM's split reads OpenAI bodies" in result.stderr


def test_the_plot_draws_vllms_splits(run_line, tmp_path) -> None:
    pytest.importorskip("matplotlib")
    out = tmp_path / "tune.svg"
    result = run_line([*BASE, "--num-gpu-blocks-override", "400", *NO_VIDEO, "--plot", str(out), "--exit-zero"])
    assert result.exit_code == 0, result.output
    svg = out.read_text()
    assert "mmpool tune" in svg and "kv 225, encoder 38,748, decode_pool 0" in svg
