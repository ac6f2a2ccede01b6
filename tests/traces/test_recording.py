"""simulate.recording: a recording's pools merged on their tick clocks, and the replay compared with them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mmpool_cli.pools.allocator import PoolRules
from mmpool_cli.pools.recorded import compare
from mmpool_cli.pools.replay import PoolLayout, simulate
from mmpool_cli.traces.reader import TraceError
from mmpool_cli.traces.recording import read_recording

MS = 1_000_000
LAYOUT = {"memory_size": 1 << 20, "data_start": 256, "slots": 4096, "consumers": 1}


def pool(root: Path, pid: int, t0: int, lines: list[dict[str, object]], **extra: object) -> None:
    base = f"pool-{pid}-0"
    text = "".join(f'{{"t": {line.pop("t")}, {json.dumps(line)[1:]}\n' for line in lines)
    (root / f"{base}.jsonl").write_text(text)
    info = {
        "format": 1,
        "file": f"{base}.jsonl",
        "pid": pid,
        "pool": 0,
        "transport": "cuda_ipc",
        "layout": LAYOUT,
        "recycle_interval_s": 0.05,
        "t0_monotonic_ns": t0,
        "complete": True,
        "dropped": 0,
        "events": {"rotations": 0},
        **extra,
    }
    (root / f"{base}.json").write_text(json.dumps(info))


def two_pools(root: Path) -> None:
    root.mkdir(exist_ok=True)
    # pool 7 starts 120 ms after pool 5: shifted by two whole 50 ms ticks (100 ms)
    pool(
        root,
        7,
        1_120 * MS,
        [
            {"t": 0.01, "op": "alloc", "id": "0", "bytes": 1000, "offset": 256},
            {"t": 0.05, "op": "free", "id": "0", "tick": 1},
        ],
    )
    pool(
        root,
        5,
        1_000 * MS,
        [
            {"t": 0.02, "op": "alloc", "id": "0", "bytes": 2000, "offset": 256},
            {"t": 0.12, "op": "alloc", "id": "1", "bytes": 3000, "offset": None},
        ],
    )


def test_pools_merge_in_start_order_shifted_by_whole_ticks(tmp_path: Path) -> None:
    two_pools(tmp_path)
    events, rec = read_recording(str(tmp_path), 2)
    assert [p["pid"] for p in rec.pools] == [5, 7]
    assert list(events.t) == [20 * MS, 110 * MS, 120 * MS, 150 * MS]
    assert list(events.worker) == [0, 1, 0, 0]
    assert rec.ids == ["5-0:0", "7-0:0", "5-0:1"]
    assert rec.offsets == [256, 256, None]


def test_fewer_workers_fold_pools_more_workers_deal_leases(tmp_path: Path) -> None:
    two_pools(tmp_path)
    events, _ = read_recording(str(tmp_path), 1)
    assert [w for w, op in zip(events.worker, events.op, strict=True) if op == 0] == [0, 0, 0]
    events, _ = read_recording(str(tmp_path), 3)
    assert [w for w, op in zip(events.worker, events.op, strict=True) if op == 0] == [0, 1, 2]


def layout(memory_size: int = 1 << 20, workers: int = 2) -> PoolLayout:
    return PoolLayout(workers, memory_size, 256, 50 * MS, PoolRules("cuda_ipc", 256, 4096))  # 0.5.23's rules


def test_compare_matches_differs_or_says_how_to_compare(tmp_path: Path) -> None:
    two_pools(tmp_path)
    events, rec = read_recording(str(tmp_path), 2)
    result = simulate(events, layout(), record=True)
    assert result.offsets == [256, 256, 256 + 2048]  # after 2000 bytes aligned to 256: what the real pool missed
    [found] = compare(rec, result)
    assert (found.code, found.severity.value) == ("record-replay-differs", "error")
    assert found.message == (
        "1 of 3 allocations differ from what the recorded pools did; the first, 5-0:1: offset a miss recorded, "
        "2304 replayed"
    )
    [found] = compare(rec, simulate(events, layout(1 << 21), record=True))
    assert found.code == "record-not-compared" and found.message.endswith(
        "replay with --size 2MiB --workers 2 --tp 1 --transport cuda_ipc with "
        "SGLANG_MM_ITEM_MEM_POOL_RECYCLE_INTERVAL_SEC=0.05"
    )
    assert compare(rec, simulate(events, layout())) == []  # without --events there is nothing to compare


def test_incomplete_recording_is_not_compared(tmp_path: Path) -> None:
    pool(tmp_path, 5, 0, [{"t": 0.01, "op": "alloc", "id": "0", "bytes": 10, "offset": 256}], dropped=3)
    events, rec = read_recording(str(tmp_path), 1)
    [found] = compare(rec, simulate(events, layout(workers=1), record=True))
    assert (found.code, found.severity.value) == ("record-not-compared", "warning")
    assert found.message == "not compared with the recording: pool 5-0: events were dropped"


def test_not_a_recording(tmp_path: Path) -> None:
    with pytest.raises(TraceError, match="no pool-\\*.json: not a recording of mmpool record"):
        read_recording(str(tmp_path), 1)
    (tmp_path / "pool-1-0.json").write_text("{")
    with pytest.raises(TraceError, match="pool-1-0.json: not a pool manifest of mmpool record"):
        read_recording(str(tmp_path), 1)


def test_a_bad_trace_line_is_located(tmp_path: Path) -> None:
    pool(tmp_path, 5, 0, [{"t": 0.01, "op": "alloc", "id": "0", "bytes": 0, "offset": 256}])
    with pytest.raises(TraceError, match="pool-5-0.jsonl:1: bytes must be a whole number"):
        read_recording(str(tmp_path), 1)


def test_merged_lines_are_one_trace_with_the_offsets(tmp_path: Path) -> None:
    from mmpool_cli.traces.recording import merged_lines

    two_pools(tmp_path / "rec")
    lines, rec = merged_lines(str(tmp_path / "rec"))
    assert len(rec.pools) == 2
    assert [json.loads(line) for line in lines] == [
        {"t": 0.02, "op": "alloc", "id": "5-0:0", "bytes": 2000, "worker": 0, "offset": 256},
        {"t": 0.11, "op": "alloc", "id": "7-0:0", "bytes": 1000, "worker": 1, "offset": 256},
        {"t": 0.12, "op": "alloc", "id": "5-0:1", "bytes": 3000, "worker": 0, "offset": None},
        {"t": 0.15, "op": "free", "id": "7-0:0"},
    ]
    (tmp_path / "merged.jsonl").write_text("".join(lines))
    from mmpool_cli.traces.reader import read_trace

    assert len(read_trace(str(tmp_path / "merged.jsonl"), 2)) == 4  # simulate --trace reads it as it stands


def test_a_pool_without_traffic_is_a_worker_with_no_events(tmp_path: Path) -> None:
    two_pools(tmp_path)
    pool(tmp_path, 9, 1_300 * MS, [])  # its recycler ticked, nothing was leased
    events, rec = read_recording(str(tmp_path), 3)
    assert [p["pid"] for p in rec.pools] == [5, 7, 9] and len(events) == 4


def three_pools(root: Path, memory_size: int) -> None:
    for pid in (5, 6, 7):
        lines: list[dict[str, object]] = [{"t": 0.01, "op": "alloc", "id": "0", "bytes": 1000, "offset": 256}]
        pool(root, pid, pid * MS, lines, layout={**LAYOUT, "memory_size": memory_size})


def test_the_advised_size_splits_into_the_recorded_pools_when_the_budget_does_not_split_evenly(
    tmp_path: Path,
) -> None:
    three_pools(tmp_path, 64 * 2**20 // 3)  # SGLang's 64 MiB over 3 workers: 22,369,621 B each
    events, rec = read_recording(str(tmp_path), 3)
    [found] = compare(rec, simulate(events, layout(workers=3), record=True))
    assert found.message == (
        "the replay's memory_size (1048576) is not the recording's (22369621): to compare with what the pools "
        "did, replay with --size 64MiB --workers 3 --tp 1 --transport cuda_ipc with "
        "SGLANG_MM_ITEM_MEM_POOL_RECYCLE_INTERVAL_SEC=0.05"
    )  # not 67108863B (22,369,621 × 3), which floors to 63 MiB: pools of 22,020,096 B, and the same advice again
    [found] = compare(rec, simulate(events, layout(64 * 2**20 // 3, workers=3), record=True))
    assert found.code == "record-replay-matches"


def test_pools_no_whole_mib_budget_makes_are_said_so(tmp_path: Path) -> None:
    three_pools(tmp_path, 1000 * 1000)
    events, rec = read_recording(str(tmp_path), 3)
    [found] = compare(rec, simulate(events, layout(workers=3), record=True))
    assert found.message == (
        "the replay's memory_size (1048576) is not the recording's (1000000): mmpool cannot replay the "
        "recording's own pools: no whole-MiB budget splits into 3 cuda_ipc pool(s) of 1,000,000 B each (the pools "
        "were not made from SGLANG_MM_FEATURE_CACHE_MB)"
    )


@pytest.mark.parametrize("t0", [None, "0.5", -1])
def test_a_pool_without_its_start_time_is_refused_never_shifted(tmp_path: Path, t0: object) -> None:
    two_pools(tmp_path)
    info = json.loads((tmp_path / "pool-7-0.json").read_text())
    info["t0_monotonic_ns"] = t0  # taken as 0, the pool would move by the machine's uptime against the other
    (tmp_path / "pool-7-0.json").write_text(json.dumps(info))
    with pytest.raises(TraceError, match="pool-7-0.json: the manifest's t0_monotonic_ns is .*, not a time"):
        read_recording(str(tmp_path), 2)


def test_a_rotated_format_1_trace_reads_its_leases_in_flight_as_given(tmp_path: Path) -> None:
    # mmpool before format 2 began a rotated part with its leases in flight, one short (a free of an id it
    # never names) or one twice (an alloc of an id in flight): read as the leases the part does name
    lines = [
        {"t": 0.0, "op": "alloc", "id": "3", "bytes": 1000, "offset": 256},
        {"t": 0.0, "op": "alloc", "id": "3", "bytes": 1000, "offset": 256},
        {"t": 0.01, "op": "free", "id": "2", "tick": 1},
        {"t": 0.05, "op": "free", "id": "3", "tick": 1},
    ]
    pool(tmp_path, 5, 1_000 * MS, lines, events={"rotations": 2})
    events, rec = read_recording(str(tmp_path), 1)
    assert list(events.op) == [0, 1] and rec.ids == ["5-0:3"]
    [found] = compare(rec, simulate(events, layout(workers=1), record=True))
    assert (
        found.message
        == "not compared with the recording: pool 5-0: the first parts of its trace are gone (--max-bytes)"
    )


def test_a_merged_traces_first_line_gives_the_recordings_layout(tmp_path: Path) -> None:
    from mmpool_cli.traces.recording import header_line, merged_lines, trace_layout

    (tmp_path / "rec").mkdir()
    three_pools(tmp_path / "rec", 64 * 2**20 // 3)
    lines, rec = merged_lines(str(tmp_path / "rec"))
    merged = tmp_path / "merged.jsonl"
    merged.write_text(header_line(rec) + "".join(lines))
    own = trace_layout(str(merged))
    assert own is not None and own.flags() == (
        "--size 64MiB --workers 3 --tp 1 --transport cuda_ipc with SGLANG_MM_ITEM_MEM_POOL_RECYCLE_INTERVAL_SEC=0.05"
    )
    plain = tmp_path / "plain.jsonl"  # a trace of traffic, or one merged before the layout came first
    plain.write_text("".join(lines))
    assert trace_layout(str(plain)) is None and trace_layout("-") is None
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"recording": {"pools": 0, "transport": "cuda_ipc", "layout": {}, "recycle_interval_s": 1}}\n')
    with pytest.raises(TraceError, match="bad.jsonl:1: the recording's pools must be a whole number from 1 to 1024"):
        trace_layout(str(bad))
    bad.write_text('{"recording": {"pools": 2}}\n')
    with pytest.raises(TraceError, match="bad.jsonl:1: not the layout of a recording .* \\(KeyError: 'transport'\\)"):
        trace_layout(str(bad))
