"""One wording for one thing, whatever the engine or command: names, releases, launch forms, counts, bytes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent.parent
LAUNCH = ["python", "-m", "sglang.launch_server", "--model-path", "M"]


def test_a_launch_command_is_named_alike_for_both_engines(run_line) -> None:
    sglang = run_line(["mmpool", "check", "--", *LAUNCH]).stdout.splitlines()[0]
    vllm = run_line(["mmpool", "check", "--", "vllm", "serve", "M"]).stdout.splitlines()[0]
    assert sglang == vllm == "launch command  [launch]  valid"


def test_the_release_is_chosen_in_one_phrase(run_line) -> None:
    plan = run_line(["mmpool", "plan", "--engine", "vllm", "--model", "qwen2.5-vl"]).stdout.splitlines()[0]
    assert plan.endswith("(vLLM 0.34.0 (newest known))")
    check = run_line(["mmpool", "check", "--", "vllm", "serve", "M"]).stdout.splitlines()[-1]
    assert check.endswith("vLLM 0.34.0 (newest known)")


def test_a_file_detected_as_vllm_is_reported_as_with_kind_vllm(run_line, tmp_path: Path) -> None:
    path = tmp_path / "vllm-qwen.yaml"
    path.write_text("mm-processor-cache-gb: 4\nmax-model-len: 8192\n")
    detected = run_line(["mmpool", "validate", str(path)])
    forced = run_line(["mmpool", "validate", str(path), "--kind", "vllm"])
    assert detected.stdout == forced.stdout
    assert detected.stdout.splitlines()[-1].endswith("vLLM 0.34.0 (newest known)")


def test_a_command_that_is_no_launch_lists_both_engines_launch_forms(run_line) -> None:
    result = run_line(["mmpool", "check", "--", "bash", "-c", "echo"])
    assert result.exit_code == 2
    assert "'bash -c echo' is neither an SGLang nor a vLLM launch" in result.stderr
    assert "sglang serve" in result.stderr and "vllm serve MODEL" in result.stderr


def test_simulate_with_nothing_to_simulate_names_every_way_to_give_it(run_line) -> None:
    result = run_line(["mmpool", "simulate"])
    assert result.exit_code == 2
    for flag in ("--feature-size", "--model", "--image", "--trace", "--from"):
        assert flag in result.stderr, flag


@pytest.mark.parametrize(
    ("value", "says"),
    [
        ("4.0", "4.0 is a number with a decimal point: write 4"),
        ("4.5", "4.5 is not a whole number: write a whole number, e.g. 4"),
        ('"4"', "'4' is text (quoted): write the number without quotes, e.g. 4"),
        ("null", "null is no value: write a whole number, e.g. 1, or remove the key"),
        ("true", "true is a boolean: write a whole number, e.g. 1"),
    ],
)
def test_a_value_of_the_wrong_type_says_what_to_write(run_line, tmp_path: Path, value: str, says: str) -> None:
    path = tmp_path / "mmpool.yaml"
    path.write_text(f"pool:\n  size: 1GiB\n  tokenizer_workers: {value}\n")
    data = json.loads(run_line(["mmpool", "validate", str(path), "--format", "json"]).stdout)
    [finding] = [f for f in data["files"][1]["findings"] if f["code"] == "config-invalid-value"]
    assert finding["message"] == f"pool.tokenizer_workers: {says}"
    assert "Input should be" not in finding["message"]


def test_one_of_a_count_is_singular(run_line, tmp_path: Path) -> None:
    log = tmp_path / "one.jsonl"
    body = {"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x.png"}}]}]}
    log.write_text(json.dumps(body) + "\n")
    image = tmp_path / "x.png"
    from PIL import Image

    Image.new("RGB", (64, 64)).save(image)
    cwd = os.getcwd()
    os.chdir(tmp_path)
    try:
        result = run_line(["mmpool", "trace", "--model", "qwen2.5-vl", str(log), "-o", str(tmp_path / "t.jsonl")])
    finally:
        os.chdir(cwd)
    assert result.exit_code == 0, result.output
    assert "mmpool trace: 1 request, 1 item, 1 alloc," in result.stderr
    assert "1 bodies" not in result.stderr and "1 requests" not in result.stderr
    assert "over 1 tokenizer worker" in result.stderr
    assert "worker(s)" not in result.stderr


@pytest.mark.parametrize(("flag", "value"), [("--size", b"1\xffGiB"), ("--sglang-version", b"\xff")])
def test_a_byte_that_is_not_utf8_is_shown_as_that_byte(flag: str, value: bytes) -> None:
    argv = [sys.executable.encode(), b"-m", b"mmpool_cli", b"plan", flag.encode(), value]
    result = subprocess.run(argv, cwd=ROOT, capture_output=True, timeout=60, check=False)
    err = result.stderr.decode()
    assert result.returncode == 2, err
    assert "\\xff" in err
    assert "udcff" not in err.lower() and "U+DC" not in err and "control character" not in err


def test_the_probe_names_its_release_as_every_command_does(run_line) -> None:
    config = str(ROOT / "tests" / "data" / "configs" / "invalid" / "mmpool-typos.yaml")
    first = run_line(["mmpool", "probe", "--config", config]).stdout.splitlines()[0]
    assert first.endswith(", SGLang 0.5.23 (newest known))")
