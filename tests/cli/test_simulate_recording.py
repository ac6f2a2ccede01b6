"""simulate --trace DIR of a recording: its own layout unless told otherwise, said, and compared in every format."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

REC = str(Path(__file__).parent.parent / "record" / "data" / "h200" / "cuda_ipc-64" / "recording")  # 2 pools, TP 2
OWN = (
    "the recording's own layout: --size 64MiB --workers 2 --tp 2 --transport cuda_ipc with "
    "SGLANG_MM_ITEM_MEM_POOL_RECYCLE_INTERVAL_SEC=0.05"
)


@pytest.fixture(autouse=True)
def _no_pool_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("SGLANG_MM_FEATURE_CACHE_MB", "SGLANG_MM_ITEM_MEM_POOL_RECYCLE_INTERVAL_SEC"):
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv("SGL_" + name.removeprefix("SGLANG_"), raising=False)


def report(run_line, *flags: str) -> dict:
    result = run_line(["mmpool", "simulate", "--trace", REC, *flags, "--format", "json"])
    assert result.exit_code in (0, 1), result.output
    return json.loads(result.stdout)


def record_finding(data: dict) -> dict:
    [found] = [f for f in data["findings"] if f["code"].startswith("record-")]
    return found


def test_a_first_replay_is_at_the_recordings_own_layout_and_says_so(run_line) -> None:
    data = report(run_line)
    assert data["source"]["assumptions"] == OWN
    assert (data["workers"], data["per_worker_bytes"], data["consumers"]) == (2, 32 * 2**20, 2)
    assert record_finding(data)["code"] == "record-replay-matches"
    assert "events" not in data  # compared without --events, and none printed


def test_human_output_shows_the_comparison(run_line) -> None:
    result = run_line(["mmpool", "simulate", "--trace", REC])
    assert result.exit_code == 1  # 159 of 477 items fell back: the target 0 is not met
    text = " ".join(result.stdout.split())
    assert "assumptions: " + OWN in text
    assert "record-replay-matches the replay made every decision the recorded pools made: 477 allocations" in text


def test_the_readme_replay_at_another_budget(run_line) -> None:
    result = run_line(["mmpool", "simulate", "--trace", REC, "--size", "2GiB"])  # README's example, as it is
    assert result.exit_code == 0, result.output
    text = " ".join(result.stdout.split())
    assert "(yours: --size)" in text and "record-not-compared" in text and "replay with --size 64MiB" in text


@pytest.mark.parametrize(
    ("flags", "yours", "differs"),
    [
        (["--workers", "1"], "--workers", "workers (1)"),
        (["--workers", "2", "--tp", "1"], "--workers, --tp", "data_start"),
        (["--dp", "2"], "--dp", "data_start"),
        (["--size", "1GiB"], "--size", "memory_size (536870912)"),
    ],
)
def test_a_flag_given_replaces_its_part_even_at_its_default(run_line, flags: list[str], yours: str, differs: str) -> None:
    data = report(run_line, *flags)
    assert f"(yours: {yours})" in data["source"]["assumptions"]
    found = record_finding(data)
    assert found["code"] == "record-not-compared" and found["message"].startswith(f"the replay's {differs}")
    assert found["message"].endswith(OWN.removeprefix("the recording's own layout: "))


def test_the_variables_are_told_too(run_line, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SGLANG_MM_FEATURE_CACHE_MB", "64")
    monkeypatch.setenv("SGLANG_MM_ITEM_MEM_POOL_RECYCLE_INTERVAL_SEC", "0.05")
    data = report(run_line)
    assert data["source"]["assumptions"] == (
        "the recording's own layout: --workers 2 --tp 2 --transport cuda_ipc "
        "(yours: SGLANG_MM_FEATURE_CACHE_MB, SGLANG_MM_ITEM_MEM_POOL_RECYCLE_INTERVAL_SEC)"
    )
    assert record_finding(data)["code"] == "record-replay-matches"


def test_the_advised_flags_replay_the_recording(run_line, monkeypatch: pytest.MonkeyPatch) -> None:
    advice = record_finding(report(run_line, "--size", "1GiB"))["message"].split("replay with ")[1]
    flags, variable = advice.split(" with ")
    name, value = variable.split("=")
    monkeypatch.setenv(name, value)
    assert record_finding(report(run_line, *flags.split()))["code"] == "record-replay-matches"


def test_an_uneven_split_round_trips_through_the_advice(run_line, tmp_path: Path) -> None:
    share = 64 * 2**20 // 3  # SGLang's 64 MiB over 3 tokenizer workers: 22,369,621 B each
    for n, pid in enumerate((5, 6, 7)):
        (tmp_path / f"pool-{pid}-0.jsonl").write_text(
            f'{{"t": 0.01, "op": "alloc", "id": "0", "bytes": {share - 40000}, "offset": 32768}}\n'
        )
        manifest = {"format": 1, "file": f"pool-{pid}-0.jsonl", "pid": pid, "pool": 0, "transport": "cuda_ipc"}
        manifest |= {"layout": {"memory_size": share, "data_start": 32768, "slots": 4096, "consumers": 1}}
        manifest |= {"recycle_interval_s": 0.05, "t0_monotonic_ns": n, "complete": True}
        (tmp_path / f"pool-{pid}-0.json").write_text(json.dumps(manifest))
    flags = ["--workers", "3", "--format", "json"]
    old = run_line(["mmpool", "simulate", "--trace", str(tmp_path), "--size", f"{share * 3}B", *flags])
    [found] = [f for f in json.loads(old.stdout)["findings"] if f["code"].startswith("record-")]
    assert "replay with --size 64MiB --workers 3 --tp 1" in found["message"]  # 67,108,863 B floors to 63 MiB
    again = run_line(["mmpool", "simulate", "--trace", str(tmp_path), "--size", "64MiB", *flags])
    [found] = [f for f in json.loads(again.stdout)["findings"] if f["code"].startswith("record-")]
    assert found["code"] == "record-replay-matches"  # the advice gives the recorded pools back
    first = run_line(["mmpool", "simulate", "--trace", str(tmp_path), "--format", "json"])
    assert json.loads(first.stdout)["source"]["assumptions"].startswith(
        "the recording's own layout: --size 64MiB --workers 3 --tp 1"
    )


def test_pools_whose_layout_no_flag_makes_are_said_so_never_advised_again(run_line, tmp_path: Path) -> None:
    # three pools of 1 MiB whose data starts at 256 B: a program that laid them out itself (as
    # tests/record/fake_sglang.py does); SGLang puts one consumer's data further in, so no flags replay them
    for n, pid in enumerate((5, 6, 7)):
        (tmp_path / f"pool-{pid}-0.jsonl").write_text(
            '{"t": 0.01, "op": "alloc", "id": "0", "bytes": 1000, "offset": 256}\n'
        )
        manifest = {"format": 1, "file": f"pool-{pid}-0.jsonl", "pid": pid, "pool": 0, "transport": "cuda_ipc"}
        manifest |= {"layout": {"memory_size": 1 << 20, "data_start": 256, "slots": 64, "consumers": 1}}
        manifest |= {"recycle_interval_s": 0.05, "t0_monotonic_ns": n, "complete": True}
        (tmp_path / f"pool-{pid}-0.json").write_text(json.dumps(manifest))
    for flags in ([], ["--tp", "2"]):
        result = run_line(["mmpool", "simulate", "--trace", str(tmp_path), *flags, "--format", "json"])
        [found] = [f for f in json.loads(result.stdout)["findings"] if f["code"].startswith("record-")]
        assert found["code"] == "record-not-compared" and "replay with" not in found["message"], flags
        assert found["message"].endswith(
            "mmpool cannot replay the recording's own pools: their data starts at 256 B, where SGLang's pools "
            "of 1 consumer start theirs at 32,768 B (the pools were not laid out by SGLang)"
        ), flags


def test_the_merged_trace_replays_as_written_at_the_recordings_layout(run_line, tmp_path: Path) -> None:
    merged = tmp_path / "merged.jsonl"
    written = run_line(["mmpool", "trace", "--from", REC, "-o", str(merged)])
    assert written.exit_code == 0, written.output
    first = json.loads(merged.read_text().splitlines()[0])
    assert list(first) == ["recording"]  # the layout it was recorded at, before the events
    from_file = json.loads(run_line(["mmpool", "simulate", "--trace", str(merged), "--format", "json"]).stdout)
    from_dir = report(run_line)
    assert from_file["source"]["assumptions"] == OWN
    assert (from_file["workers"], from_file["per_worker_bytes"], from_file["consumers"]) == (2, 32 * 2**20, 2)
    for key in ("status", "event_count", "duration_ns", "items", "bytes", "occupancy", "fragmentation", "per_worker"):
        assert from_file[key] == from_dir[key], key  # the replay of the file is the replay of the recording
    flags = ["--size", "1GiB", "--format", "json"]
    told = json.loads(run_line(["mmpool", "simulate", "--trace", str(merged), *flags]).stdout)
    assert told["source"]["assumptions"].endswith("(yours: --size)") and told["per_worker_bytes"] == 2**29


def test_a_merged_trace_without_its_layout_still_reads(run_line, tmp_path: Path) -> None:
    merged = tmp_path / "merged.jsonl"
    run_line(["mmpool", "trace", "--from", REC, "-o", str(merged)])
    old = tmp_path / "old.jsonl"  # as mmpool wrote it before the layout came first: the flags are the user's
    old.write_text("".join(merged.read_text().splitlines(keepends=True)[1:]))
    result = run_line(["mmpool", "simulate", "--trace", str(old), "--workers", "2", "--tp", "2", "--format", "json"])
    assert result.exit_code in (0, 1), result.output
    assert "assumptions" not in json.loads(result.stdout)["source"]
