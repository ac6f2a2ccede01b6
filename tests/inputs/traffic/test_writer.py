"""The trace writer: simulate's format, exact times, and the optional item key simulate reads."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from mmpool_cli.inputs.traffic.writer import Lease, events, seconds, write
from mmpool_cli.traces.reader import TraceError, read_trace


def test_seconds_are_exact() -> None:
    assert [seconds(n) for n in (0, 1, 1_500_000_000, 20_000_000, 3 * 10**9 + 7)] == [
        "0",
        "0.000000001",
        "1.5",
        "0.02",
        "3.000000007",
    ]


def test_round_trip_through_simulates_reader(tmp_path: Path) -> None:
    leases = [
        Lease("r1/0", 0, 100, 0, "image 10x10", 20_000_000),
        Lease("r1/1", 0, 200, 0, "image 20x10", 20_000_000),
        Lease('q"2/0', 10_000_000, 300, 1, "image 5x5", 10_000_000),  # freed the instant it is taken
    ]
    timeline = events(leases)
    buf = io.StringIO()
    assert write(buf, timeline, {le.id: le.item for le in leases}) == 6
    path = tmp_path / "t.jsonl"
    path.write_text(buf.getvalue())
    assert list(read_trace(str(path), workers=2).with_ids()) == timeline
    assert '"item": "image 20x10"' in buf.getvalue()


def test_the_reader_checks_the_item_key(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    path.write_text('{"t": 0, "op": "alloc", "id": "a", "bytes": 1, "item": 5}\n')
    with pytest.raises(TraceError, match="t.jsonl:1: item must be a string"):
        read_trace(str(path), workers=1)
    path.write_text('{"t": 0, "op": "free", "id": "a", "item": "x"}\n')
    with pytest.raises(TraceError, match="unknown key 'item' in a free event"):
        read_trace(str(path), workers=1)
