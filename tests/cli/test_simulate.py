"""`mmpool simulate` end to end: traces, synthetic workloads, the budget search, exit codes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mmpool_cli.cli import main

TRACE = [
    '{"t": 0, "op": "alloc", "id": "r1/0", "bytes": 6291456}',
    '{"t": 0.01, "op": "alloc", "id": "r2/0", "bytes": 6291456, "worker": 1}',
    '{"t": 0.02, "op": "free", "id": "r1/0"}',
    '{"t": 0.05, "op": "alloc", "id": "r3/0", "bytes": 6291456}',
    '{"t": 0.051, "op": "alloc", "id": "r4/0", "bytes": 1000}',
    '{"t": 0.06, "op": "free", "id": "r3/0"}',
]


@pytest.fixture
def trace(tmp_path: Path) -> str:
    path = tmp_path / "trace.jsonl"
    path.write_text("\n".join(TRACE) + "\n")
    return str(path)


def test_trace_json_events_give_every_decision(run_line, trace: str) -> None:
    # 14 MiB over 2 workers at TP 1: 7 MiB each, 32 KiB of header: one 6 MiB lease per worker at a time
    result = run_line(
        ["mmpool", "simulate", "--trace", trace, "--size", "14MiB", "--workers", "2", "--format", "json", "--events"]
    )
    assert result.exit_code == 1, result.output  # one fallback misses the default target of 0
    data = json.loads(result.stdout)
    assert data["schema_version"] == 1
    assert data["status"] == "fail"
    assert data["per_worker_bytes"] == 7 * 1024 * 1024
    assert data["header_bytes"] == 32768
    assert data["events"] == [
        {"id": "r1/0", "worker": 0, "offset": 32768},
        {"id": "r2/0", "worker": 1, "offset": 32768},
        {"id": "r3/0", "worker": 0, "offset": None},  # r1 was acknowledged at 0.02 s; the tick at 0.05 s comes after
        {"id": "r4/0", "worker": 0, "offset": 32768},  # the tick at 0.05 s gave r1 back
    ]
    assert data["items"] == {"total": 4, "fallback": 1, "fallback_rate": 0.25, "slot_cap_misses": 0, "space_misses": 1}
    assert data["bytes"]["fallback"] == 6291456
    assert data["occupancy"]["peak_bytes"] == 6291456


def test_trace_meets_a_target_exit_0(run_line, trace: str) -> None:
    result = run_line(
        ["mmpool", "simulate", "--trace", trace, "--size", "14MiB", "--workers", "2", "--target-fallback", "1/4"]
    )
    assert result.exit_code == 0, result.output
    assert "1 of 4 (25.00%)" in result.stdout
    assert "met" in result.stdout


def test_smallest_budget_prints_settings_on_one_line(run_line, trace: str) -> None:
    result = run_line(["mmpool", "simulate", "--trace", trace, "--workers", "2", "--tp", "2", "--smallest-budget"])
    assert result.exit_code == 0, result.output
    # two 6 MiB leases in flight on worker 0 (r1 not yet given back when r3 comes): 12 MiB + 48 KiB, twice
    assert "SGLANG_MM_FEATURE_CACHE_MB=25 " in result.stdout
    assert "export SGLANG_MM_FEATURE_CACHE_MB=25\n" in result.stdout
    assert (
        "sglang serve --model-path MODEL --tokenizer-worker-num 2 --mm-feature-transport cuda_ipc --tp-size 2\n"
        in result.stdout
    )


def test_smallest_budget_json(run_line, trace: str) -> None:
    result = run_line(
        [
            "mmpool",
            "simulate",
            "--trace",
            trace,
            "--workers",
            "2",
            "--smallest-budget",
            "--search",
            "scan",
            "--format",
            "json",
        ]
    )
    data = json.loads(result.stdout)
    search = data["smallest_budget"]
    assert search["sglang_mm_feature_cache_mb"] == 25
    assert search["method"] == "scan"
    assert search["settings"]["env"] == {"SGLANG_MM_FEATURE_CACHE_MB": "25"}
    assert [t["mb"] for t in search["trials"]] == sorted({t["mb"] for t in search["trials"]})
    assert all(t["fallback"] > 0 for t in search["trials"] if t["mb"] < 25)


def test_synthetic_workload_is_deterministic(run_line) -> None:
    argv = [
        "mmpool",
        "simulate",
        "--feature-size",
        "6MiB",
        "--feature-size",
        "3MiB",
        "--rate",
        "20",
        "--requests",
        "300",
        "--mode",
        "deferred",
        "--duration",
        "1.5",
        "--residency",
        "exponential",
        "--seed",
        "4",
        "--size",
        "256MiB",
        "--format",
        "json",
    ]
    first = run_line(argv)
    second = run_line(argv)
    assert first.stdout == second.stdout
    data = json.loads(first.stdout)
    assert data["source"]["synthetic"]["items"] == [6291456, 3145728]
    assert data["items"]["total"] == 600
    assert 0 < data["items"]["fallback"] < 600


def test_recycle_interval_is_read_like_sglang(run_line, trace: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SGLANG_MM_ITEM_MEM_POOL_RECYCLE_INTERVAL_SEC", "0.01")
    data = json.loads(
        run_line(
            ["mmpool", "simulate", "--trace", trace, "--size", "14MiB", "--workers", "2", "--format", "json"]
        ).stdout
    )
    assert data["recycle_interval_ns"] == 10_000_000
    assert data["items"]["fallback"] == 0  # r1 is given back at the tick at 0.02 s, before r3 comes
    monkeypatch.setenv("SGLANG_MM_ITEM_MEM_POOL_RECYCLE_INTERVAL_SEC", "fast")
    data = json.loads(run_line(["mmpool", "simulate", "--trace", trace, "--workers", "2", "--format", "json"]).stdout)
    assert (data["recycle_interval_ns"], data["recycle_interval_source"]) == (50_000_000, "default")


@pytest.mark.parametrize("size", ["0", "1MiB"])
def test_a_budget_sglang_refuses_is_reported(run_line, trace: str, size: str) -> None:
    result = run_line(["mmpool", "simulate", "--trace", trace, "--size", size, "--workers", "64", "--format", "json"])
    assert result.exit_code == 1
    data = json.loads(result.stdout)
    assert ("too small" if size != "0" else "total_pool_size must be positive") in data["refused"]
    assert "items" not in data


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--trace", "TRACE", "--rate", "3"], "--rate describes a synthetic workload"),
        (["--trace", "TRACE", "--feature-size", "1MiB"], "--feature-size describes a synthetic workload"),
        (["--trace", "TRACE", "--events"], "--events needs --format json"),
        (["--trace", "TRACE", "--plot", "out.pdf"], "must end in .svg or .png"),
        (["--trace", "TRACE", "--target-fallback", "2"], "--target-fallback: expected a fraction"),
        (["--trace", "TRACE", "--workers", "1"], "worker must be a whole number from 0 to 0"),
        (["--rate", "3"], "nothing to simulate: give the features of one request (--feature-size SIZE"),
        (["--feature-size", "1MiB"], "exactly one of --rate"),
        (
            ["--feature-size", "1MiB", "--rate", "3", "--duration", "1e-12"],
            "--duration: 1e-12 is finer than a nanosecond",
        ),
        (["--feature-size", "1MiB", "--rate", "3", "--hold", "-1"], "--hold: expected seconds"),
        (["--trace", "/nonexistent/trace.jsonl"], "cannot open the trace"),
        (["--trace", "TRACE", "--model", "qwen2.5-vl", "--image", "64x64"], "--image describes a synthetic workload"),
        (["--model", "whisper", "--audio", "30", "--rate", "3"], "does not pool this family's features"),
        (["--model", "qwen2.5-vl", "--rate", "3"], "--model needs the items of one request"),
        (["--image", "64x64", "--rate", "3"], "--image needs --model"),
        (
            ["--model", "qwen2.5-vl", "--image", "64x64", "--rate", "3", "--page-size", "16"],
            "--page-size need --model PATH",
        ),
        (["--trace", "TRACE", "--workers", "0"], "Tokenizer worker num must >= 1"),
        (["--trace", "TRACE", "--workers", "100000", "--size", "1TiB"], "at most 1024 tokenizer workers"),
        (["--trace", "TRACE", "--idle-timeout", "-1"], "--idle-timeout: expected seconds"),
        (["--trace", "TRACE", "--idle-timeout", "nan"], "--idle-timeout: expected seconds"),
        (["--trace", "TRACE", "--max-events", "0"], "--max-events: must be at least 1"),
        (["--feature-size", "1MiB", "--rate", "1e-300"], "--rate: must be from"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(
    trace: str, args: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(["simulate", *[trace if a == "TRACE" else a for a in args]])
    err = capsys.readouterr().err
    assert code == 2
    assert message in err
    assert err.count("\n") == 1


def test_a_malformed_trace_line_is_located(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_text(TRACE[0] + "\n" + '{"t": 0.1, "op": "free", "id": "ghost"}\n')
    assert main(["simulate", "--trace", str(path)]) == 2
    assert f"mmpool: error: {path}:2: free of unknown id 'ghost'" in capsys.readouterr().err


def test_human_output_for_a_refused_budget_and_an_unreachable_target(run_line, tmp_path: Path) -> None:
    path = tmp_path / "slots.jsonl"
    lines = [f'{{"t": 0, "op": "alloc", "id": "{i}", "bytes": 256}}\n' for i in range(4097)]
    lines.append('{"t": 0, "op": "alloc", "id": "other", "bytes": 256, "worker": 63}\n')  # a trace for 64 workers
    path.write_text("".join(lines))
    result = run_line(
        ["mmpool", "simulate", "--trace", str(path), "--size", "1MiB", "--workers", "64", "--smallest-budget"]
    )
    assert result.exit_code == 1
    assert "refused" in result.stdout
    assert "No budget up to 67 MiB meets the target" in result.stdout  # from 67 MiB no alloc misses for space


def test_settings_stay_one_line_on_a_narrow_terminal(run_line, trace: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "40")
    result = run_line(["mmpool", "simulate", "--trace", trace, "--workers", "2", "--tp", "2", "--smallest-budget"])
    assert (
        "sglang serve --model-path MODEL --tokenizer-worker-num 2 --mm-feature-transport cuda_ipc --tp-size 2\n"
        in result.stdout
    )


def test_a_model_and_its_images_give_the_features_of_a_request(run_line) -> None:
    # Qwen2.5-VL's 1920x1080 image: pixel_values [10764, 1176] float32 (feature-sizes.md section 3)
    argv = ["mmpool", "simulate", "--model", "qwen2.5-vl", "--image", "1920x1080", "--image", "1920x1080"]
    argv += ["--feature-size", "1KiB", "--rate", "4", "--requests", "20", "--format", "json"]
    result = run_line(argv)
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["source"]["synthetic"]["items"] == [1024, 50633856, 50633856]
    assert data["items"]["total"] == 60


def test_simulate_follows_the_release_and_refuses_the_shm_pool(run_line, trace: str) -> None:
    argv = ["mmpool", "simulate", "--trace", trace, "--workers", "2", "--tp", "2", "--format", "json"]
    data = json.loads(run_line([*argv, "--sglang-version", "0.5.18"]).stdout)
    # the stream-ordered allocator is the same from 0.5.18 to 0.5.23; C = tp before 0.5.22 too
    assert (data["sglang_version"], data["sglang_version_chosen"], data["consumers"]) == (
        "0.5.18",
        "--sglang-version",
        2,
    )
    old = run_line([*argv, "--sglang-version", "0.5.17"])
    assert old.exit_code == 2
    assert "simulate models the stream-ordered pool of SGLang 0.5.18 and later" in old.stderr


PACKED = [
    '{"t": 0, "op": "alloc", "id": "r1/img0", "bytes": 1000000}',
    '{"t": 0, "op": "alloc", "id": "r1/img1", "bytes": 1000000}',
    '{"t": 0.01, "op": "free", "id": "r1/img0"}',
    '{"t": 0.02, "op": "alloc", "id": "r2/img0", "bytes": 3000000}',
    '{"t": 0.06, "op": "alloc", "id": "r3/img0", "bytes": 3000000}',
]


def test_cuda_vmm_packs_a_requests_features_and_reports_data_offsets(run_line, tmp_path: Path) -> None:
    path = tmp_path / "packed.jsonl"
    path.write_text("\n".join(PACKED) + "\n")
    # 4 MiB at TP 2: a 4 MiB pool (2 MiB granules), 256 bytes of ack words in front of each chunk
    args = ["--trace", str(path), "--size", "4MiB", "--tp", "2", "--transport", "cuda_vmm", "--format", "json"]
    result = run_line(["mmpool", "simulate", *args, "--events"])
    data = json.loads(result.stdout)
    assert data["transport"] == "cuda_vmm"
    assert data["per_worker_bytes"] == 4 * 1024 * 1024
    assert data["max_inflight_slices"] is None
    assert data["events"] == [
        {"id": "r1/img0", "worker": 0, "offset": 256},  # one packed chunk of 2,000,000 bytes at 0
        {"id": "r1/img1", "worker": 0, "offset": 256 + 1000000},
        {"id": "r2/img0", "worker": 0, "offset": None},  # r1's chunk is acknowledged, not yet given back
        {"id": "r3/img0", "worker": 0, "offset": 256},  # the tick at 0.05 s freed r1's chunk (one ack for both)
    ]
    assert result.exit_code == 1


def test_simulate_reports_what_plan_reports_for_the_environment(run_line, trace: str) -> None:
    env = {"SGLANG_MM_FEATURE_CACHE_MB": "1GB", "SGLANG_MM_ITEM_MEM_POOL_RECYCLE_INTERVAL_SEC": "abc"}
    result = run_line(["mmpool", "simulate", "--trace", trace, "--workers", "2", "--format", "json"], env=env)
    data = json.loads(result.stdout)
    codes = {f["code"] for f in data["findings"]}
    assert {"env-budget-invalid", "env-recycle-invalid"} <= codes
    assert data["status"] == "fail"
    assert result.exit_code == 1
    human = run_line(["mmpool", "simulate", "--trace", trace, "--workers", "2"], env=env)
    assert "OK" not in human.stdout.splitlines()[0]
    assert "not an integer" in human.stdout


def test_a_budget_plan_refuses_is_not_simulated_nor_searched(run_line, trace: str) -> None:
    result = run_line(
        ["mmpool", "simulate", "--trace", trace, "--workers", "2", "--size", "300GiB", "--format", "json"]
    )
    data = json.loads(result.stdout)
    assert result.exit_code == 1
    assert "more than any GPU has" in data["refused"]
    assert "items" not in data
    huge = '{"t": 0, "op": "alloc", "id": "big", "bytes": 400000000000}'
    path = Path(trace).with_name("huge.jsonl")
    path.write_text(huge + "\n")
    found = run_line(["mmpool", "simulate", "--trace", str(path), "--smallest-budget", "--format", "json"])
    search = json.loads(found.stdout)["smallest_budget"]
    assert search["sglang_mm_feature_cache_mb"] is None
    assert max(t["mb"] for t in search["trials"]) <= 288 * 1024
    assert search["top_mb"] <= 288 * 1024


def test_safe_budget_json(run_line, trace: str) -> None:
    result = run_line(
        ["mmpool", "simulate", "--trace", trace, "--workers", "2", "--smallest-budget", "--format", "json"]
    )
    search = json.loads(result.stdout)["smallest_budget"]
    assert search["sglang_mm_feature_cache_mb"] == 25
    assert search["upper_mb"] == min(50, search["no_miss_mb"])
    assert search["fragile_mb"] is None
    assert search["method"] == "safe" and search["estimate"] is False


def test_the_budget_found_says_what_it_costs_in_kv_tokens(run_line, tmp_path: Path, monkeypatch) -> None:
    config = {
        "model_type": "qwen2_5_vl",
        "hidden_size": 8192,
        "num_attention_heads": 64,
        "num_key_value_heads": 8,
        "num_hidden_layers": 80,
    }
    (tmp_path / "config.json").write_text(json.dumps(config))
    monkeypatch.setenv("SGLANG_VLM_CACHE_SIZE_MB", "0")
    args = ["--model", str(tmp_path), "--image", "1920x1080", "--tp", "8", "--concurrency", "2", "--requests", "20"]
    result = run_line(["mmpool", "simulate", *args, "--smallest-budget", "--format", "json"])
    search = json.loads(result.stdout)["smallest_budget"]
    mb = search["sglang_mm_feature_cache_mb"]
    kv = search["kv_cost"]
    # TP 8 of Qwen2.5-VL-72B: 40,960 bytes a token on every rank; the budget found, in tokens
    assert kv["feature_budget_mb"] == mb
    assert kv["tokens_min"] <= mb * 1024 * 1024 // 40_960 <= kv["tokens_max"]
    fp8 = run_line(
        ["mmpool", "simulate", *args, "--smallest-budget", "--kv-cache-dtype", "fp8_e4m3", "--format", "json"]
    )
    assert json.loads(fp8.stdout)["smallest_budget"]["kv_cost"]["cell_bytes"] == 20_480
    human = run_line(["mmpool", "simulate", *args, "--smallest-budget"]).stdout
    assert "KV tokens given up" in human
    assert f"--model-path {tmp_path}" in human


@pytest.mark.parametrize(
    ("args", "check"),
    [
        (["--base-gpu-id", "1"], lambda d: "--base-gpu-id" in d["smallest_budget"]["settings"]["args"]),
        (
            ["--transport", "cuda_vmm", "--vmm-granularity", "4MiB"],
            lambda d: d["smallest_budget"]["sglang_mm_feature_cache_mb"] % 4 == 0,
        ),
    ],
)
def test_every_option_simulate_lists_is_taken(run_line, trace: str, args, check) -> None:
    result = run_line(
        ["mmpool", "simulate", "--trace", trace, "--workers", "2", "--smallest-budget", *args, "--format", "json"]
    )
    assert result.exit_code in (0, 1), result.output
    assert check(json.loads(result.stdout))


def test_the_context_size_counts_in_the_hbm_bound(run_line, trace: str) -> None:
    # 2 workers with 200 GiB contexts each, plus 2 pools of 512 MiB (1024 MiB split in two, whole
    # 2 MiB pages already): 2 x 214,748,364,800 + 2 x 536,870,912 = 430,570,471,424 B, more than the
    # 288 GiB of any GPU: the run is refused with that figure; with the default context it runs
    base = ["mmpool", "simulate", "--trace", trace, "--workers", "2", "--format", "json"]
    assert json.loads(run_line(base).stdout)["refused"] is None
    refused = run_line([*base, "--context-size", "200GiB"])
    assert refused.exit_code == 1
    data = json.loads(refused.stdout)
    assert data["status"] == "fail"
    assert "2 tokenizer CUDA contexts need 430,570,471,424 B (401 GiB) on GPU 0" in data["refused"]
    # the search has no budget left to try: 2 x 144 GiB of contexts fill the 288 GiB
    search = run_line([*base, "--smallest-budget", "--context-size", "144GiB"])
    assert (search.exit_code, search.stdout) == (1, "")
    assert search.stderr.startswith(
        "mmpool: error: --smallest-budget: the plan refuses every budget for this layout; at the smallest, 1 MiB: "
        "the pools and 2 tokenizer CUDA contexts need "
    )


def test_a_search_where_the_plan_refuses_every_budget_says_why_before_reading_any_traffic(run_line, tmp_path) -> None:
    # 1,024 tokenizer contexts of 552,402,944 B each fill no GPU, whatever the budget: the reason, exit 1,
    # before the trace is read (its bad line would be exit 2)
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"t": 0, "op": "alloc"}\n')
    for traffic in (["--feature-size", "10MiB", "--rate", "5"], ["--trace", str(bad)]):
        search = run_line(["mmpool", "simulate", "--workers", "1024", "--smallest-budget", *traffic])
        assert (search.exit_code, search.stdout) == (1, ""), search.stderr
        assert search.stderr == (
            "mmpool: error: --smallest-budget: the plan refuses every budget for this layout; at the smallest, "
            "33 MiB: the pools and 1024 tokenizer CUDA contexts need 567,808,098,304 B (≈528.81 GiB) on GPU 0, "
            "more than any GPU has (288 GiB (NVIDIA B300)); use fewer tokenizer workers or a smaller budget\n"
        )


def test_progress_shows_only_on_a_terminal_with_human_output(monkeypatch, capsys) -> None:
    import sys

    from mmpool_cli.cli import simulate as cli
    from mmpool_cli.cli.options import OutputFormat

    def options(output: OutputFormat) -> cli.RunOptions:
        return cli.RunOptions(None, True, "0", cli.BasisChoice.items, cli.SearchChoice.safe, False, 1, 1.0, output)

    monkeypatch.setattr(sys.stderr, "isatty", lambda: True, raising=False)
    with cli._progress(options(OutputFormat.json), "searching budgets") as tick:
        tick(3)
    assert capsys.readouterr().err == ""  # never with --format json
    with cli._progress(options(OutputFormat.human), "searching budgets") as tick:
        tick(3)
    assert "searching budgets" in capsys.readouterr().err
    monkeypatch.setattr(sys.stderr, "isatty", lambda: False, raising=False)
    with cli._progress(options(OutputFormat.human), "searching budgets") as tick:
        tick(3)
    assert capsys.readouterr().err == ""  # nor when stderr is piped


LOG = Path(__file__).parent.parent / "engines" / "sglang" / "traffic" / "data" / "sglang-0.5.23" / "server-json-level2.log"


@pytest.mark.parametrize("search", [[], ["--smallest-budget"], ["--format", "json", "--events"]])
def test_a_trace_made_for_one_worker_is_refused_over_several(run_line, tmp_path: Path, search: list[str]) -> None:
    one = tmp_path / "one.jsonl"
    assert run_line(["mmpool", "trace", "--model", "qwen2.5-vl", str(LOG), "-o", str(one)]).exit_code == 0
    result = run_line(["mmpool", "simulate", "--trace", str(one), "--workers", "4", *search])
    assert (result.exit_code, result.stdout) == (2, ""), result.output  # never every request on worker 0 of 4
    assert result.stderr == (
        f"mmpool: error: --workers 4: every alloc of --trace {one} is on worker 0, so the other 3 would idle (a "
        "trace made for one worker); make it for 4: mmpool trace --workers 4 (or simulate --from LOG --workers 4); "
        "for one worker taking all the traffic, simulate --workers 1 with its share as --size\n"
    )
    assert run_line(["mmpool", "simulate", "--trace", str(one), *search]).exit_code in (0, 1)  # one worker: its own

    four = tmp_path / "four.jsonl"
    made = ["mmpool", "trace", "--model", "qwen2.5-vl", str(LOG), "--workers", "4", "-o", str(four)]
    assert run_line(made).exit_code == 0
    spread = run_line(["mmpool", "simulate", "--trace", str(four), "--workers", "4", "--format", "json"])
    assert spread.exit_code in (0, 1), spread.output
    assert all(w["items"] for w in json.loads(spread.stdout)["per_worker"])  # dealt when it was made
