"""``mmpool cache --engine vllm``: the report in both formats, the trace's content keys, the JSON shape
SGLang's caches share, and bad input (the other engine's flags included) as one line with exit 2."""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

import pytest

from mmpool_cli.caches.from_trace import read_items

EXAMPLE = str(Path(__file__).resolve().parents[2] / "examples" / "traffic" / "vllm-chats.jsonl")


@pytest.fixture
def run(run_line):
    def invoke(*args: str, engine: str = "vllm"):
        return run_line(["mmpool", "cache", "--engine", engine, *args])

    return invoke


def test_the_example_log_in_json_and_for_a_terminal(run):
    result = run("--model", "qwen2.5-vl", "--from", EXAMPLE, "--format", "json", "--api-server-count", "2")
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    processor, encoder = data["caches"]
    assert processor["layout"] == "processor_only" and processor["api_processes"] == 2
    assert encoder["name"] == "encoder" and encoder["recommended_tokens"] > 0
    human = run("--model", "qwen2.5-vl", "--from", EXAMPLE, "--mm-processor-cache-type", "shm")
    assert human.exit_code == 0 and "layout         shm" in human.stdout
    assert human.stdout.startswith("mmpool cache: OK  (vLLM 0.34.0, qwen2.5-vl)\n")


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--from", EXAMPLE], "--model NAME|PATH is needed"),
        (["--model", "kimi-vl", "--from", EXAMPLE], "knows the processed items of"),
        (["--model", "qwen2.5-vl", "--from", EXAMPLE, "--host-memory", "1GiB"], "vllm-host-memory-exceeded"),
        (["--model", "qwen2.5-vl", "--from", EXAMPLE, "--mm-processor-cache-gb", "4GB"], "--mm-processor-cache-gb"),
        (["--model", "qwen2.5-vl", "--from", EXAMPLE, "--assume-image", "0x0"], "--assume-image"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(run, args, message):
    result = run(*args)
    assert result.exit_code == 2, result.output
    assert message in result.output and result.output.count("\n") == 1


def test_a_cache_type_no_release_has_is_refused(run):
    result = run("--model", "qwen2.5-vl", "--from", EXAMPLE, "--mm-processor-cache-type", "fifo")
    assert result.exit_code == 2 and "fifo" in result.output


def test_an_unknown_model_and_a_cache_turned_off(run):
    result = run("--model", "no-such-model", "--from", EXAMPLE)
    assert result.exit_code == 2 and "no-such-model" in result.output and result.output.count("\n") == 1
    off = run("--model", "qwen2.5-vl", "--from", EXAMPLE, "--mm-processor-cache-gb", "0", "--format", "json")
    assert off.exit_code == 1, off.output  # an off cache whose traffic would hit misses its target
    processor = json.loads(off.stdout)["caches"][0]
    assert (processor["layout"], processor["size_bytes"], processor["hits"]) == ("disabled", 0, 0)
    assert processor["recommended_setting"].startswith("--mm-processor-cache-gb ")


def test_each_release_is_replayed_by_its_own_rules(run):
    for version in ("0.30.0", "0.33.0"):
        ok = run("--model", "qwen2.5-vl", "--from", EXAMPLE, "--vllm-version", version, "--format", "json")
        assert ok.exit_code == 0 and json.loads(ok.stdout)["vllm_version"] == version


def test_exit_1_where_a_cache_misses_its_target_at_the_deployments_size(run):
    small = run("--model", "qwen2.5-vl", "--from", EXAMPLE, "--mm-processor-cache-gb", "0.01", "--format", "json")
    assert small.exit_code == 1, small.output
    assert json.loads(small.stdout)["status"] == "fail"
    processor, encoder = json.loads(small.stdout)["caches"]
    assert not processor["meets_target"] and encoder["meets_target"]
    loose = run("--model", "qwen2.5-vl", "--from", EXAMPLE, "--mm-processor-cache-gb", "0.01", "--target-hits", "0")
    assert loose.exit_code == 0, loose.output


def test_the_trace_of_the_log_replays_to_the_same_caches(run, run_line, tmp_path: Path):
    trace = tmp_path / "t.jsonl"
    assert run_line(["mmpool", "trace", "--model", "qwen2.5-vl", EXAMPLE, "-o", str(trace)]).exit_code == 0
    assert all(item.key for item in read_items(str(trace)))  # content keys: the same image bytes hit
    logged = run("--model", "qwen2.5-vl", "--from", EXAMPLE, "--format", "json")
    traced = run("--model", "qwen2.5-vl", "--trace", str(trace), "--format", "json")
    assert traced.exit_code == logged.exit_code == 0, traced.output
    assert json.loads(traced.stdout)["caches"] == json.loads(logged.stdout)["caches"]
    assert json.loads(traced.stdout)["source"] == str(trace)


def test_the_json_has_the_shape_of_sglangs(run, tmp_path: Path):
    vllm = json.loads(run("--model", "qwen2.5-vl", "--from", EXAMPLE, "--format", "json").stdout)
    argv = ["--model", "qwen2.5-vl", "--hidden-size", "3584", "--from", EXAMPLE, "--format", "json"]
    sglang = json.loads(run(*argv, engine="sglang").stdout)
    assert set(sglang) <= set(vllm) and (vllm["schema_version"], vllm["status"]) == (sglang["schema_version"], "ok")
    assert (vllm["engine"], sglang["engine"]) == ("vLLM 0.34.0", "SGLang 0.5.23")
    shared = set(sglang["caches"][0])
    for cache in vllm["caches"]:
        assert shared <= set(cache), shared - set(cache)
        assert cache["engine"] == "vllm" and isinstance(cache["recommended_bytes"], int)
        assert all({"size_bytes", "hits", "work_saved"} <= set(point) for point in cache["curve"])


@pytest.mark.parametrize(
    ("engine", "flag", "message"),
    [
        ("vllm", ["--workers", "2"], "--workers is for --engine sglang: vLLM's API processes are --api-server-count"),
        ("vllm", ["--tp", "2"], "--tensor-parallel-size"),
        ("vllm", ["--hidden-size", "3584"], "--hidden-size is for --engine sglang"),
        ("vllm", ["--mm-preprocess-cache-size-mb", "4"], "--mm-processor-cache-gb"),
        ("vllm", ["--assume-video", "640x480x8"], "--assume-video is for --engine sglang"),
        ("vllm", ["--plot", "c.svg"], "--plot is for --engine sglang"),
        ("sglang", ["--api-server-count", "2"], "--api-server-count is a vLLM flag: add --engine vllm"),
        ("sglang", ["--encoder-window", "2"], "--encoder-window is a vLLM flag: add --engine vllm"),
        ("sglang", ["--vllm-version", "0.34.0"], "--vllm-version is a vLLM flag"),
        ("trtllm", [], "--engine trtllm: choose one of sglang, vllm"),
    ],
)
def test_a_flag_of_the_other_engine_is_one_line_and_exit_2(run, engine, flag, message):
    result = run("--model", "qwen2.5-vl", "--from", EXAMPLE, *flag, engine=engine)
    assert result.exit_code == 2, result.output
    assert message in result.stderr and result.stderr.count("\n") == 1, result.stderr


def test_the_flags_both_engines_share(run, tmp_path: Path):
    given = run("--model", "qwen2.5-vl", "--from", EXAMPLE, "--gpu-name", "NVIDIA GB10", "--format", "json")
    assert given.exit_code == 0, given.output
    trace = run("--model", "qwen2.5-vl", "--trace", EXAMPLE, "--assume-image", "640x480")
    assert trace.exit_code == 2 and "a --trace carries its own sizes" in trace.stderr
    helped = run("--help")
    assert "sglang or vllm" in helped.stdout and "--encoder-window" in helped.stdout
    assert "mmpool cache --engine vllm" in helped.stdout


def test_the_examples_readme_row_runs_as_written(run_line, monkeypatch):
    root = Path(EXAMPLE).parents[2]
    rows = re.findall(r"`(mmpool cache --engine vllm [^`]*)`", (root / "examples" / "README.md").read_text())
    assert rows
    monkeypatch.chdir(root)  # the row's paths are the repository's
    for row in rows:
        result = run_line(shlex.split(row))
        assert result.exit_code == 0 and "Processor cache (host RAM)" in result.stdout, result.output


def test_the_normalize_and_dtype_flags_size_the_items(run):
    def unbounded(*flags: str) -> int:
        result = run("--model", "qwen2.5-vl", "--from", EXAMPLE, "--format", "json", *flags)
        assert result.exit_code in (0, 1), result.output
        processor = json.loads(result.stdout)["caches"][0]
        return int(processor["unbounded_bytes"]), processor["pixel_dtype"]

    raw, dtype = unbounded()
    assert dtype == "uint8"
    assert unbounded("--no-mm-device-do-normalize") == (2 * raw - 24 * 24, "bfloat16")  # 24 distinct items' grids
    assert unbounded("--no-mm-device-do-normalize", "--dtype", "float32") == (4 * raw - 3 * 24 * 24, "float32")
    assert unbounded("--mm-device-do-normalize") == (raw, "uint8")
