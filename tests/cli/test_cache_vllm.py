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
    processor, encoder, radix = data["caches"]
    assert radix["name"] == "prefix" and radix["unit"] == "tokens"
    assert processor["layout"] == "processor_only" and processor["api_processes"] == 2
    assert encoder["name"] == "encoder" and encoder["recommended_tokens"] > 0
    human = run("--model", "qwen2.5-vl", "--from", EXAMPLE, "--mm-processor-cache-type", "shm")
    assert human.exit_code == 0 and "layout         shm" in human.stdout
    assert human.stdout.startswith("mmpool cache: OK  (vLLM 0.34.0, qwen2.5-vl)\n")


def test_prefix_caching_serves_a_chats_earlier_images_which_the_encoder_cache_never_sees(run):
    argv = ["--model", "qwen2.5-vl", "--from", EXAMPLE, "--format", "json"]
    data = json.loads(run(*argv).stdout)
    processor, encoder, radix = data["caches"]
    off = json.loads(run(*argv, "--no-enable-prefix-caching").stdout)
    processor_off, encoder_off, radix_off = off["caches"]
    # the processor cache (the API process) sees every item either way; the encoder cache only those outside a prefix
    assert processor["lookups"] == processor_off["lookups"] == data["traffic"]["images"]
    assert encoder_off["lookups"] == data["traffic"]["images"] and encoder_off["served_by_prefix"] == 0
    assert encoder["lookups"] + encoder["served_by_prefix"] <= encoder_off["lookups"]
    assert encoder["served_by_prefix"] > 0 and encoder["lookups"] < encoder_off["lookups"]
    assert (radix_off["size_tokens"], radix_off["hits"]) == (0, 0) and radix["hits"] > 0
    assert [f["code"] for f in data["findings"]] == ["prefix-capacity-assumed", "prefix-tokens-estimated"]
    assert [f["code"] for f in off["findings"]] == ["prefix-cache-off"]
    # a capacity of whole blocks: the curve's points are blocks of --block-size tokens
    small = json.loads(run(*argv, "--num-gpu-blocks-override", "600", "--block-size", "32").stdout)
    assert small["caches"][2]["size_blocks"] == 600 and small["caches"][2]["size_tokens"] == 600 * 32
    assert small["caches"][1]["lookups"] >= encoder["lookups"]
    human = run("--model", "qwen2.5-vl", "--from", EXAMPLE)
    assert "Prefix cache (KV blocks)" in human.stdout and "never encoded" in human.stdout


@pytest.mark.parametrize(
    ("engine", "flag", "message"),
    [
        ("sglang", ["--no-enable-prefix-caching"], "SGLang's is --disable-radix-cache"),
        ("sglang", ["--num-gpu-blocks-override", "8"], "SGLang's KV capacity is --max-total-tokens"),
        ("vllm", ["--disable-radix-cache"], "vLLM's is --no-enable-prefix-caching"),
        ("vllm", ["--max-total-tokens", "8"], "vLLM's KV capacity is --num-gpu-blocks-override"),
        ("vllm", ["--num-gpu-blocks-override", "1"], "from 2 (one is the null block)"),
    ],
)
def test_each_engines_prefix_flags_and_the_others_name_for_them(run, engine, flag, message):
    sized = ["--hidden-size", "3584"] if engine == "sglang" else []
    result = run("--model", "qwen2.5-vl", *sized, "--from", EXAMPLE, *flag, engine=engine)
    assert result.exit_code == 2, result.output
    assert message in result.output


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
    processor, encoder, _ = json.loads(small.stdout)["caches"]
    assert not processor["meets_target"] and encoder["meets_target"]
    loose = run("--model", "qwen2.5-vl", "--from", EXAMPLE, "--mm-processor-cache-gb", "0.01", "--target-hits", "0")
    assert loose.exit_code == 0, loose.output


def test_the_trace_of_the_log_replays_to_the_same_caches(run, run_line, tmp_path: Path):
    trace = tmp_path / "t.jsonl"
    assert run_line(["mmpool", "trace", "--model", "qwen2.5-vl", EXAMPLE, "-o", str(trace)]).exit_code == 0
    assert all(item.key for item in read_items(str(trace)))  # content keys: the same image bytes hit
    # a trace carries no prompts: what the log gives without prefix caching
    logged = run("--model", "qwen2.5-vl", "--from", EXAMPLE, "--format", "json", "--no-enable-prefix-caching")
    traced = run("--model", "qwen2.5-vl", "--trace", str(trace), "--format", "json")
    assert traced.exit_code == 0, traced.output

    def figures(caches: list[dict]) -> list[dict]:
        return [{k: v for k, v in c.items() if k not in ("notes", "served_by_prefix")} for c in caches]

    assert figures(json.loads(traced.stdout)["caches"]) == figures(json.loads(logged.stdout)["caches"][:2])
    assert json.loads(traced.stdout)["source"] == str(trace)


def test_the_json_has_the_shape_of_sglangs(run, tmp_path: Path):
    vllm = json.loads(run("--model", "qwen2.5-vl", "--from", EXAMPLE, "--format", "json").stdout)
    argv = ["--model", "qwen2.5-vl", "--hidden-size", "3584", "--from", EXAMPLE, "--format", "json"]
    sglang = json.loads(run(*argv, engine="sglang").stdout)
    assert set(sglang) <= set(vllm) and (vllm["schema_version"], vllm["status"]) == (sglang["schema_version"], "ok")
    assert (vllm["engine"], sglang["engine"]) == ("vLLM 0.34.0", "SGLang 0.5.23")
    # an encoder cache's own keys: behind a prefix cache, the tokens it computes
    shared = set(sglang["caches"][0]) - {"served_by_prefix", "encoder_tokens"}
    for cache in vllm["caches"]:
        assert shared <= set(cache), shared - set(cache)
        assert cache["engine"] == "vllm" and isinstance(cache["recommended_bytes"], int | None)
        assert all({"size_bytes", "hits", "work_saved"} <= set(point) for point in cache["curve"])
    assert "encoder_tokens" in sglang["caches"][0] and "encoder_tokens" in vllm["caches"][1]


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
