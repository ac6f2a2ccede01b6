"""`mmpool simulate --curve`: every point equals simulate alone at its budget, every source, the bounds."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from mmpool_cli.cli.simulate_options import curve_arg
from mmpool_cli.errors import MmpoolError

MiB = 1 << 20
TRACE = ["mmpool", "simulate", "--trace", "examples/trace.jsonl", "--workers", "2", "--tp", "2"]
KEYS = ["budget_bytes", "items", "fallback_items", "bytes", "fallback_bytes", "kv_tokens"]


def write_trace(path: Path, seed: int, workers: int) -> None:
    """Random traffic: features of 1 to 60 MiB, requests of one or two, acknowledged 0 to 80 ms later."""
    rng = random.Random(seed)
    lines, live, t = [], [], 0.0
    for n in range(rng.randint(20, 60)):
        t += rng.choice([0.0, 0.001, 0.01, 0.03])
        if live and rng.random() < 0.45:
            lines.append({"t": round(t, 3), "op": "free", "id": live.pop(rng.randrange(len(live)))})
            continue
        worker = rng.randrange(workers)
        for k in range(rng.choice([1, 1, 2])):
            ident = f"req{n}/img{k}"
            size = rng.randint(1 * MiB, 60 * MiB) // 7 * 7
            lines.append({"t": round(t, 3), "op": "alloc", "id": ident, "bytes": size, "worker": worker})
            live.append(ident)
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))


def figures(data: dict) -> tuple[int, int, int, int]:
    return data["items"]["total"], data["items"]["fallback"], data["bytes"]["total"], data["bytes"]["fallback"]


@pytest.mark.parametrize("transport", ["cuda_ipc", "cuda_vmm"])
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_every_point_of_the_curve_is_simulate_alone_at_that_budget(run_line, tmp_path, transport, seed) -> None:
    trace = tmp_path / "t.jsonl"
    workers = 1 + seed % 2
    write_trace(trace, seed, workers)
    base = ["mmpool", "simulate", "--trace", str(trace), "--workers", str(workers), "--transport", transport]
    result = run_line([*base, "--curve", "--curve-points", "9", "--format", "json"])
    assert result.exit_code in (0, 1), result.stderr
    data = json.loads(result.stdout)
    curve = data["curve"]
    assert 2 <= len(curve) <= 9
    assert [list(p) for p in curve] == [KEYS] * len(curve)
    span = data["curve_range"]
    assert curve[0]["budget_bytes"] == span["from_bytes"] == span["largest_feature_budget_bytes"]
    assert curve[-1]["budget_bytes"] == span["to_bytes"] == span["no_miss_budget_bytes"]
    assert curve[-1]["fallback_items"] == 0  # from the no-miss budget on, nothing misses for space
    for point in curve:
        assert point["budget_bytes"] % MiB == 0 and point["kv_tokens"] is None
        alone = run_line([*base, "--size", f"{point['budget_bytes'] // MiB}MiB", "--format", "json"])
        expected = figures(json.loads(alone.stdout))
        assert (point["items"], point["fallback_items"], point["bytes"], point["fallback_bytes"]) == expected


def test_the_curve_always_marks_the_budget_smallest_budget_gives(run_line) -> None:
    for target in ("0", "0.5"):
        curve = json.loads(run_line([*TRACE, "--curve", "--target-fallback", target, "--format", "json"]).stdout)
        alone = json.loads(
            run_line([*TRACE, "--smallest-budget", "--target-fallback", target, "--format", "json"]).stdout
        )
        # the same answer: the search of the mark starts from the curve's replays, so its trials differ
        answer = [k for k in alone["smallest_budget"] if k not in ("trials", "replayed_events", "limit_events")]
        assert curve["smallest_budget"]["exact"] and alone["smallest_budget"]["exact"]
        assert [curve["smallest_budget"][k] for k in answer] == [alone["smallest_budget"][k] for k in answer]
        points = {p["budget_bytes"] // MiB for p in curve["curve"]}
        assert points <= {t["mb"] for t in curve["smallest_budget"]["trials"]}  # the curve's replays, not again
        both = run_line([*TRACE, "--curve", "--smallest-budget", "--target-fallback", target, "--format", "json"])
        both_data = json.loads(both.stdout)
        assert both_data["smallest_budget"]["limit_events"] == 10**9  # --smallest-budget's own limit
        both_data["smallest_budget"]["limit_events"] = curve["smallest_budget"]["limit_events"]
        assert both_data == curve  # proven either way: --smallest-budget adds only its larger limit
    human = run_line([*TRACE, "--curve", "--curve-points", "8"]).stdout
    assert "Pool curve\n8 budgets from 97 MiB (the largest feature's need) to 141 MiB" in human
    assert "\n141   0 / 3 (0.00%)         0 B (0.00%)  ◀ smallest safe\n" in human
    assert "SGLANG_MM_FEATURE_CACHE_MB=141 (safe" in human
    assert "export SGLANG_MM_FEATURE_CACHE_MB=141" in human


def test_the_mark_of_the_curve_alone_is_proven_within_about_the_curve_s_own_cost(run_line, tmp_path) -> None:
    trace = tmp_path / "t.jsonl"
    write_trace(trace, 3, 2)
    base = ["mmpool", "simulate", "--trace", str(trace), "--workers", "2", "--curve", "--format", "json"]
    events = len(trace.read_text().splitlines())
    limits = {
        (): max(10_000_000, 32 * events),  # at least 10M events, else half the curve's points in whole replays
        ("--curve-points", "1000"): max(10_000_000, 500 * events),
        ("--search-limit", "3x"): 3 * events,  # as given
        ("--smallest-budget",): 10**9,  # --smallest-budget's search, whatever else is asked
    }
    for extra, limit in limits.items():
        data = json.loads(run_line([*base, *extra]).stdout)
        assert data["smallest_budget"]["limit_events"] == limit, extra


def test_an_unproven_mark_is_drawn_as_such_with_how_far_its_proof_got(run_line, tmp_path, monkeypatch) -> None:
    from mmpool_cli.usecases import simulate as use

    monkeypatch.setattr(use, "CURVE_PROOF_EVENTS", 1)  # the curve's 2 points: a proof of 1 whole replay
    trace = tmp_path / "t.jsonl"
    write_trace(trace, 3, 2)
    base = ["mmpool", "simulate", "--trace", str(trace), "--workers", "2", "--curve", "--curve-points", "2"]
    data = json.loads(run_line([*base, "--format", "json"]).stdout)
    found = data["smallest_budget"]
    assert not found["exact"] and found["limit_events"] == len(trace.read_text().splitlines())
    lo, hi = found["checked_mb"]
    undecided = found["undecided"]
    # what the bound says is so: every budget checked meets the target (0), each replayed alone
    for mb in range(lo, hi + 1):
        alone = json.loads(run_line([*base[:6], "--size", f"{mb}MiB", "--format", "json"]).stdout)
        assert alone["items"]["fallback"] == 0, mb
    human = run_line(base).stdout
    assert f"the smallest safe budget, NOT PROVEN, {found['sglang_mm_feature_cache_mb']} MiB, is not one" in human
    said = " ".join(human.split())
    assert (
        f"the mark is not proven: every budget from {lo} to {hi} MiB meets the target; "
        f"{undecided['budgets']} budgets from {undecided['from_mb']} to {undecided['to_mb']} MiB are undecided (below)"
    ) in said
    assert f"SGLANG_MM_FEATURE_CACHE_MB={found['sglang_mm_feature_cache_mb']} (not proven" in said
    marked = run_line([*base[:-1], "3", "--curve", f"{found['sglang_mm_feature_cache_mb']}MiB:"]).stdout
    assert "◀ smallest safe, NOT PROVEN" in marked


def test_a_recommendation_outside_the_points_is_said(run_line) -> None:
    human = run_line([*TRACE, "--curve", "97MiB:140MiB", "--curve-points", "3"]).stdout
    assert "◀" not in human
    assert "the smallest safe budget, 141 MiB, is not one of the points (below)" in human
    assert "SGLANG_MM_FEATURE_CACHE_MB=141 (safe" in human


@pytest.mark.parametrize(
    "source",
    [
        ["--feature-size", "30MiB", "--concurrency", "4", "--requests", "40"],
        ["--trace", "examples/trace.jsonl", "--workers", "2"],
        ["--model", "qwen2.5-vl", "--from", "examples/server.log"],
        ["--trace", "RECORDING"],
    ],
    ids=["synthetic", "trace", "from", "recording"],
)
def test_every_source_draws_its_curve(run_line, tmp_path, source) -> None:
    if "RECORDING" in source:
        source = ["--trace", str(recording(tmp_path))]
    result = run_line(["mmpool", "simulate", *source, "--curve", "--curve-points", "5", "--format", "json"])
    assert result.exit_code in (0, 1), result.stderr
    curve = json.loads(result.stdout)["curve"]
    assert 1 <= len(curve) <= 5
    budgets = [p["budget_bytes"] for p in curve]
    assert budgets == sorted(set(budgets))
    assert all(p["items"] > 0 for p in curve)


def recording(root: Path) -> Path:
    """A directory of mmpool record: one pool, three leases."""
    root = root / "rec"
    root.mkdir()
    lines = [
        {"t": 0.01, "op": "alloc", "id": "0", "bytes": 3 * MiB, "offset": 256},
        {"t": 0.02, "op": "alloc", "id": "1", "bytes": 2 * MiB, "offset": 256 + 3 * MiB},
        {"t": 0.03, "op": "free", "id": "0", "tick": 1},
        {"t": 0.06, "op": "alloc", "id": "2", "bytes": 4 * MiB, "offset": 256},
    ]
    (root / "pool-5-0.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    info = {
        "format": 1,
        "file": "pool-5-0.jsonl",
        "pid": 5,
        "pool": 0,
        "transport": "cuda_ipc",
        "layout": {"memory_size": 16 * MiB, "data_start": 256, "slots": 4096, "consumers": 1},
        "recycle_interval_s": 0.05,
        "t0_monotonic_ns": 1_000_000,
        "complete": True,
        "dropped": 0,
        "events": {"rotations": 0},
    }
    (root / "pool-5-0.json").write_text(json.dumps(info))
    return root


def test_each_point_costs_the_kv_tokens_plan_gives_at_that_budget(run_line, tmp_path, monkeypatch) -> None:
    config = {"model_type": "qwen2_5_vl", "num_attention_heads": 64, "num_key_value_heads": 8}
    (tmp_path / "config.json").write_text(json.dumps({**config, "hidden_size": 8192, "num_hidden_layers": 80}))
    monkeypatch.setenv("SGLANG_VLM_CACHE_SIZE_MB", "0")
    args = ["--model", str(tmp_path), "--image", "1920x1080", "--tp", "8", "--concurrency", "2", "--requests", "20"]
    data = json.loads(
        run_line(["mmpool", "simulate", *args, "--curve", "--curve-points", "4", "--format", "json"]).stdout
    )
    for point in data["curve"]:
        mb = point["budget_bytes"] // MiB
        plan = json.loads(
            run_line(
                ["mmpool", "plan", "--model", str(tmp_path), "--tp", "8", "--size", f"{mb}MiB", "--format", "json"]
            ).stdout
        )
        assert point["kv_tokens"] == plan["kv_cost"]["tokens_max"]
        assert point["kv_tokens"] >= mb * MiB // 40_960  # 40,960 bytes a token on every rank at TP 8
    human = run_line(["mmpool", "simulate", *args, "--curve", "--curve-points", "4"]).stdout
    assert "KV tokens" in human.split("Pool curve")[1].splitlines()[2]


@pytest.mark.parametrize(
    ("argv", "parsed"),
    [
        (["--curve"], ":"),
        (["--curve", "--format", "json"], ":"),
        (["--curve", "100MiB:120MiB", "--format", "json"], "100MiB:120MiB"),
        (["--curve=:120MiB", "--format", "json"], ":120MiB"),
        (["--format", "json", "--curve"], ":"),
    ],
)
def test_a_bare_curve_takes_the_default_range(run_line, argv, parsed) -> None:
    result = run_line([*TRACE, *argv, "--format", "json"])
    assert result.exit_code == 0, result.stderr
    span = json.loads(result.stdout)["curve_range"]
    lo, hi = curve_arg(parsed)
    assert span["from_bytes"] == (97 if lo is None else lo) * MiB
    assert span["to_bytes"] == (141 if hi is None else hi) * MiB


def test_a_bare_curve_before_double_dash_leaves_the_arguments_after_it_alone(run_line) -> None:
    result = run_line([*TRACE, "--curve", "--", "--x"])
    assert result.exit_code == 2
    assert "ARGS describes traffic to read" in result.stderr  # '--x' reached ARGS; --curve took its default


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (
            ["--curve", "2GiB:1GiB"],
            "--curve '2GiB:1GiB': the lower bound is above the upper one; write --curve 1GiB:2GiB",
        ),
        (
            ["--curve", "0:1GiB"],
            "--curve '0:1GiB': the lower bound, 0 MiB, is below the smallest budget SGLang accepts",
        ),
        (
            ["--curve", "1:2MiB"],
            "--curve '1:2MiB': 1 is 1 B, not a whole MiB, and SGLang takes the budget in whole MiB",
        ),
        (["--curve", "1GB:2GiB"], "write 953MiB or 954MiB"),
        (["--curve", "300GiB:"], "--curve '300GiB:': 300GiB is more than any GPU has (288 GiB (NVIDIA B300))"),
        (["--curve", ":1PiB"], "1PiB is more than any GPU has"),
        (["--curve", "200MiB:"], "the lower bound is above 141 MiB, the budget from which no alloc can miss"),
        (["--curve", ":50MiB"], "the largest feature of the traffic needs 97 MiB, above the upper bound"),
        (["--curve", "1GiB"], "--curve: expected LO:HI, e.g. 512MiB:2GiB"),
        (["--curve", "x:1GiB"], "--curve 'x:1GiB': invalid size 'x'"),
        (["--curve", "-1GB:"], "--curve '-1GB:': invalid size '-1GB': a size cannot be negative"),
        (["--curve", "-1GiB:2GiB", "--format", "json"], "invalid size '-1GiB': a size cannot be negative"),
        (["--curve", "-.5GiB:"], "invalid size '-.5GiB': a size cannot be negative"),
        (["--curve", "--curve-points", "0"], "--curve-points: expected 2 to 1024 budgets"),
        (["--curve", "--curve-points", "1"], "--curve-points: expected 2 to 1024 budgets"),
        (["--curve", "--curve-points", "100000"], "--curve-points: expected 2 to 1024 budgets"),
        (["--curve-points", "8"], "--curve-points sets the points of --curve; add --curve"),
    ],
)
def test_bad_bounds_are_one_line_and_exit_2(run_line, argv, message) -> None:
    result = run_line([*TRACE, *argv])
    assert result.exit_code == 2
    assert message in result.stderr
    assert result.stderr.count("\n") == 1 and "Traceback" not in result.stderr
    assert result.stdout == ""


def test_a_bound_above_what_plan_accepts_names_that_budget(run_line) -> None:
    # 8 workers' CUDA contexts leave less than a GPU for the pools: plan refuses the largest budgets
    result = run_line([*TRACE, "--workers", "8", "--curve", ":288GiB"])
    assert result.exit_code == 2
    assert result.stderr == (
        "mmpool: error: --curve ':288GiB': the upper bound, 294912 MiB, is above the largest budget plan accepts "
        "for this layout (290688 MiB; 'mmpool plan --size 294912MiB' says why)\n"
    )


def test_a_huge_number_of_points_is_a_usage_error(run_line) -> None:
    result = run_line([*TRACE, "--curve", "--curve-points", "9" * 30])
    assert result.exit_code == 2
    assert "is beyond the 64-bit integers" in result.stderr and "Traceback" not in result.stderr


def test_help_lists_both_flags(run_line) -> None:
    text = run_line(["mmpool", "simulate", "--help"]).stdout
    assert "--curve [LO:HI]" in text and "--curve-points N" in text


def test_curve_arg_reads_sizes_as_size_does() -> None:
    assert curve_arg("512MiB:2GiB") == (512, 2048)
    assert curve_arg(" 1Gi : ") == (1024, None)
    assert curve_arg(":") == (None, None)
    with pytest.raises(MmpoolError):
        curve_arg("-1MiB:")


MODEL_DIR = "examples/qwen2.5-vl-7b"  # its config.json: 28 layers, 4 KV heads of 128


def plan_tokens(run_line, mb: int, layout: list[str]) -> int:
    argv = ["mmpool", "plan", "--model", MODEL_DIR, *layout, "--size", f"{mb}MiB", "--format", "json"]
    return json.loads(run_line(argv).stdout)["kv_cost"]["tokens_max"]


@pytest.mark.parametrize(
    ("source", "layout"),
    [
        (["--from", "examples/server.log"], []),
        (["--from", "examples/server.log", "--kv-cache-dtype", "fp8_e4m3", "--page-size", "16"], []),
        (["--trace", "examples/trace.jsonl", "--workers", "2"], ["--workers", "2", "--tp", "2"]),
        (["--trace", "RECORDING"], ["--workers", "1", "--tp", "1"]),
    ],
    ids=["from", "from-fp8-paged", "trace", "recording"],
)
def test_every_source_with_a_model_directory_gives_each_points_kv_tokens(run_line, tmp_path, source, layout) -> None:
    if "RECORDING" in source:
        source = ["--trace", str(recording(tmp_path))]
    kv = [a for a in ("--kv-cache-dtype", "fp8_e4m3", "--page-size", "16") if a in source]
    argv = ["mmpool", "simulate", *source, "--model", MODEL_DIR, *(["--tp", "2"] if "--workers" in source else [])]
    result = run_line([*argv, "--curve", "--curve-points", "4", "--format", "json"])
    assert result.exit_code in (0, 1), result.stderr
    data = json.loads(result.stdout)
    for point in data["curve"]:
        assert point["kv_tokens"] == plan_tokens(run_line, point["budget_bytes"] // MiB, [*layout, *kv])
    found = data["smallest_budget"]  # the recommendation's cost, as --smallest-budget gives it
    assert found["kv_cost"]["tokens_max"] == plan_tokens(run_line, found["sglang_mm_feature_cache_mb"], [*layout, *kv])
    human = run_line([*argv, "--curve", "--curve-points", "4"]).stdout
    assert "KV tokens" in human.split("Pool curve")[1].splitlines()[2]
    assert "KV tokens per budget" not in human


@pytest.mark.parametrize(
    ("source", "why"),
    [
        (["--trace", "examples/trace.jsonl", "--workers", "2"], "give --model DIR (a model directory"),
        (["--model", "qwen2.5-vl", "--from", "examples/server.log"], "--model 'qwen2.5-vl' gives no attention shape"),
        (["--feature-size", "30MiB", "--concurrency", "4"], "give --model DIR (a model directory"),
    ],
    ids=["trace", "from-family", "synthetic"],
)
def test_without_a_model_directory_the_kv_tokens_are_null_and_the_table_says_how(run_line, source, why) -> None:
    argv = ["mmpool", "simulate", *source, "--curve", "--curve-points", "3"]
    data = json.loads(run_line([*argv, "--format", "json"]).stdout)
    assert [p["kv_tokens"] for p in data["curve"]] == [None] * len(data["curve"])
    human = " ".join(run_line(argv).stdout.split())
    assert f"KV tokens per budget: {why}" in human


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (
            ["--model", "qwen2.5-vl", "--curve"],
            "--model 'qwen2.5-vl' gives no attention shape (a family name has none): with --trace, --model gives "
            "only the KV tokens",
        ),
        ([], "--model gives a --trace only the KV tokens that --curve and --smallest-budget report"),
        (["--image", "1920x1080", "--curve"], "--image describes a synthetic workload; a --trace carries its own"),
        (["--min-pixels", "100", "--curve"], "--min-pixels describes a synthetic workload"),
    ],
)
def test_a_traces_model_gives_the_kv_tokens_only(run_line, extra, message) -> None:
    model = [] if "--model" in extra else ["--model", MODEL_DIR]
    result = run_line([*TRACE, *model, *extra])
    assert result.exit_code == 2 and result.stdout == ""
    assert result.stderr.startswith(f"mmpool: error: {message}") and result.stderr.count("\n") == 1
