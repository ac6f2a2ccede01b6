"""``--engine vllm`` on plan, vLLM launches in check, ``validate --kind vllm``: figures and bad input."""

from __future__ import annotations

import json

import pytest

GiB = 1 << 30
FOUR_1080P = ["--image", "1920x1080"] * 4


def test_the_readme_example_dp4_internal_lb(run_line) -> None:
    result = run_line(
        [
            "mmpool",
            "plan",
            "--engine",
            "vllm",
            "--model",
            "qwen2.5-vl",
            *FOUR_1080P,
            "--data-parallel-size",
            "4",
            "--format",
            "json",
        ]
    )
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert (data["engine"], data["status"], data["vllm_version"]) == ("vllm", "ok", "0.34.0")
    v = data["vllm"]
    assert {
        k: v["processor_cache"][k] for k in ("layout", "api_processes", "cache_bytes", "host_bytes", "shm_bytes")
    } == {
        "layout": "processor_only",
        "api_processes": 4,
        "cache_bytes": 4 * GiB,
        "host_bytes": 32 * GiB,
        "shm_bytes": 0,
    }
    enc = v["encoder_cache"]
    assert (enc["budget_tokens"], enc["max_num_batched_tokens"], enc["max_tokens_per_item"]) == (114_688, 8192, 114_688)
    assert enc["budget_bytes"] == 114_688 * 7168
    assert [(i["item"], i["tokens"], i["fits"]) for i in enc["items"]] == [("image 1920x1080", 2691, True)] * 4
    assert v["gpu_decode_pool"] is None


def test_human_output_and_the_host_bound(run_line) -> None:
    result = run_line(
        [
            "mmpool",
            "plan",
            "--engine",
            "vllm",
            "--model",
            "qwen2.5-vl",
            "--data-parallel-size",
            "4",
            "--host-memory",
            "16GiB",
        ]
    )
    assert result.exit_code == 1
    assert "host RAM, at most  34,359,738,368 B (32 GiB)" in result.stdout
    assert "vllm-host-memory-exceeded" in result.stdout


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--mm-processor-cache-gb", "4GB"], "argument --mm-processor-cache-gb: invalid float value: '4GB'"),
        (["--mm-processor-cache-gb", "-1"], "--mm-processor-cache-gb -1: vLLM refuses it at start-up"),
        (["--mm-ipc-gpu-memory-gb", "nan"], "greater than or equal to 0"),
        (["--max-num-batched-tokens", "1.5K"], "Decimals are not allowed"),
        (["--vllm-version", "0.29.0"], "vLLM '0.29.0' is not a release mmpool knows"),
        (["--model", "no-such-family"], "no-such-family"),
        (["--workers", "4"], "--workers is an SGLang pool flag"),
        (["--audio", "3"], "--audio is an SGLang workload flag"),
        # the bounds of the SGLang side: ranks count GPUs, a GPU pool fits one GPU, a host cache one host
        (["--data-parallel-size", "99999"], "--data-parallel-size 99999: mmpool plans at most 4096 ranks"),
        (["--tensor-parallel-size", "4097"], "--tensor-parallel-size 4097: mmpool plans at most 4096 ranks"),
        (["--api-server-count", "4097"], "--api-server-count 4097: mmpool plans at most 4096 API servers"),
        (["--mm-processor-cache-gb", "1e30"], "--mm-processor-cache-gb 1e30: more GiB than one host has (64 TiB"),
        (["--mm-ipc-gpu-memory-gb", "289"], "--mm-ipc-gpu-memory-gb 289: more GiB than any GPU has (288 GiB"),
    ],
)
def test_bad_plan_input_is_one_line_and_exit_2(run_line, args, says) -> None:
    result = run_line(["mmpool", "plan", "--engine", "vllm", *args])
    assert result.exit_code == 2, result.output
    assert says in result.stderr and result.stderr.count("\n") == 1 and result.stdout == ""


def test_the_bounds_hold_at_their_edge_and_for_the_copies_together(run_line) -> None:
    at_edge = run_line(["mmpool", "plan", "--engine", "vllm", "--data-parallel-size", "4096", "--mm-ipc-gpu-memory-gb", "288"])
    assert "flag-bad-value" not in at_edge.stdout + at_edge.stderr
    # 62.5 TiB of cache is within one host, but it and its render-only copy take 125 TiB: no host has that
    both = run_line(["mmpool", "plan", "--engine", "vllm", "--mm-processor-cache-gb", "64000", "--format", "json"])
    assert both.exit_code == 1, both.output
    found = [f for f in json.loads(both.stdout)["findings"] if f["code"] == "vllm-host-memory-exceeded"]
    assert len(found) == 1 and "more than one host has (64 TiB" in found[0]["message"]


def test_check_applies_the_same_bounds(run_line) -> None:
    argv = ["mmpool", "check", "--format", "json", "--", "vllm", "serve", "m", "--mm-processor-cache-gb", "1e30"]
    result = run_line([*argv, "--data-parallel-size", "99999"])
    assert result.exit_code == 1
    got = {(f["code"], f["location"]) for f in json.loads(result.stdout)["files"][0]["findings"]}
    assert {("flag-bad-value", "argv[4]"), ("flag-bad-value", "argv[6]")} <= got


def test_a_vllm_flag_without_the_engine_is_a_usage_error(run_line) -> None:
    result = run_line(["mmpool", "plan", "--data-parallel-size", "4"])
    assert result.exit_code == 2 and "add --engine vllm" in result.stderr


def test_check_reads_the_launch_and_locates_every_problem(run_line) -> None:
    result = run_line(
        [
            "mmpool",
            "check",
            "--host-memory",
            "1TiB",
            "--format",
            "json",
            "--",
            "vllm",
            "serve",
            "Qwen/Qwen2.5-VL-7B-Instruct",
            "-dp",
            "108",
            "--mm-ipc-gpu-memory-gb",
            "1e-7",
            "--mm-processor-cache-gb",
            "x",
            "--limit-mm-per-prompt.video",
            "0",
            "--bogus",
        ]
    )
    assert result.exit_code == 1
    data = json.loads(result.stdout)
    assert data["engine"] == "vllm" and "sglang_version" not in data
    got = {(f["code"], f["location"]) for f in data["files"][0]["findings"] if f["severity"] == "error"}
    assert got == {
        ("vllm-gpu-pool-floors-to-zero", "argv[6]"),
        ("flag-bad-value", "argv[8]"),
        ("unrecognized-argument", "argv[11]"),
    }


def test_check_flag_of_another_release(run_line) -> None:
    result = run_line(
        [
            "mmpool",
            "check",
            "--host-memory",
            "1TiB",
            "--vllm-version",
            "0.30.0",
            "--",
            "vllm",
            "serve",
            "m",
            "--anthropic-disabled-thinking-effort",
            "auto",
        ]
    )
    assert result.exit_code == 1
    assert (
        "argv[3]: error [flag-not-in-release] vLLM 0.30.0 has no --anthropic-disabled-thinking-effort" in result.stdout
    )


def test_check_with_a_config_file_and_a_model(run_line, tmp_path) -> None:
    cfg = tmp_path / "serve.yaml"
    cfg.write_text("data-parallel-size: 4\nmm-processor-cache-gb: 1\n")
    result = run_line(
        [
            "mmpool",
            "check",
            "--host-memory",
            "1TiB",
            "--model",
            "qwen2.5-vl",
            "--image",
            "1920x1080",
            "--format",
            "json",
            "--",
            "python3",
            "-m",
            "vllm.entrypoints.openai.api_server",
            "--model",
            "Qwen/Qwen2.5-VL-7B-Instruct",
            "--config",
            str(cfg),
        ]
    )
    assert result.exit_code == 0, result.output
    plan = json.loads(result.stdout)["files"][0]["plan"]["vllm"]
    assert plan["processor_cache"]["host_bytes"] == 8 * GiB
    assert plan["encoder_cache"]["items"][0]["tokens"] == 2691


def test_sglang_only_flags_on_a_vllm_launch_are_refused(run_line) -> None:
    result = run_line(["mmpool", "check", "--sglang-version", "0.5.23", "--", "vllm", "serve", "m"])
    assert result.exit_code == 2 and "this is a vLLM launch" in result.stderr


def test_validate_kind_vllm(run_line, tmp_path) -> None:
    cfg = tmp_path / "serve.yaml"
    cfg.write_text("model: m\ndata-parallel-size: 4\nmm-processor-cache-gb: -1\nmm-ipc-gpu-memory-gb: 1e-9\n")
    result = run_line(["mmpool", "validate", "--kind", "vllm", str(cfg), "--format", "json"])
    assert result.exit_code == 1
    data = json.loads(result.stdout)
    assert data["engine"] == "vllm"
    got = [(f["code"], f["location"]) for f in data["files"][1]["findings"] if f["severity"] == "error"]
    assert got == [("vllm-value-refused", f"{cfg}:3:24"), ("vllm-gpu-pool-floors-to-zero", f"{cfg}:4:23")]


@pytest.mark.parametrize("command", ["simulate", "probe"])
def test_simulate_and_probe_say_vllm_has_no_pool_to_replay(run_line, command) -> None:
    result = run_line(["mmpool", command, "--engine", "vllm"])
    assert result.exit_code == 2 and "mmpool plan --engine vllm" in result.stderr


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["--", "vllm", "chat"], "'vllm chat' is not a vLLM server launch"),
        (["--model", "bogus", "--", "vllm", "serve", "m"], "--model 'bogus': not a known model family"),
        (["--image", "1x1", "--", "sglang", "serve", "m"], "--image applies to vLLM launches"),
        (["--vllm-version", "0.2", "--", "vllm", "serve", "m"], "vLLM '0.2' is not a release mmpool knows"),
    ],
)
def test_bad_check_input_is_one_line_and_exit_2(run_line, argv, says) -> None:
    result = run_line(["mmpool", "check", *argv])
    assert result.exit_code == 2 and says in result.stderr and result.stderr.count("\n") == 1


DECODE = ["plan", "--engine", "vllm", "--model", "qwen2.5-vl", "--video", "1920x1080:30:30",
          "--mm-ipc-gpu-memory-gb", "2", "--video-backend", "pynvvideocodec"]  # fmt: skip
POOL = 2 * 2**30
DECODERS = 2_201_170_739  # one API process's decoder surfaces and CUDA context (gpu_pool.decoder_bytes_per_process)


def test_the_decode_pool_says_what_it_takes_from_the_kv_cache_and_why(run_line) -> None:
    data = json.loads(run_line(["mmpool", *DECODE, "--format", "json"]).stdout)["vllm"]["gpu_decode_pool"]
    assert (data["total_bytes"], data["decoder_bytes"], data["kv_reserved_bytes"]) == (POOL, DECODERS, POOL + DECODERS)
    assert "kv_bytes_per_token" in data and data["kv_bytes_per_token"] is None  # a family name: no KV shape
    text = run_line(["mmpool", *DECODE], env={"COLUMNS": "200"}).stdout
    assert f"decoders                     {DECODERS:,} B (≈2.05 GiB)" in text
    assert (
        f"taken from each worker's KV  {POOL + DECODERS:,} B (≈4.05 GiB)  "
        f"[the pool's {POOL:,} B + the decoders' {DECODERS:,} B]"
    ) in text
    assert "(4.05 GiB)" not in text and "(2.05 GiB)" not in text
    assert "KV bytes per token           unknown (a model directory with config.json gives it)" in text


def test_simulate_shows_each_pool_in_exact_bytes(run_line) -> None:
    result = run_line(["mmpool", "simulate", "--feature-size", "8MiB", "--rate", "4", "--requests", "10",
                       "--workers", "2", "--size", "128MiB"])  # fmt: skip
    # 64 MiB each; SGLang 0.5.23's control header for one consumer is 32,768 B
    assert "2 × 67,108,864 B (64 MiB), 67,076,096 B (≈63.97 MiB) usable each" in result.stdout
