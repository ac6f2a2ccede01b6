"""Reading traces: exact times, located one-line errors, and bounds on size and silence."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mmpool_cli.simulate import trace as tr
from mmpool_cli.simulate.replay import ALLOC, FREE
from mmpool_cli.simulate.trace import TraceError, read_trace


def _write(tmp_path: Path, *lines: str) -> str:
    path = tmp_path / "trace.jsonl"
    path.write_text("\n".join(lines) + "\n")
    return str(path)


def test_events_come_back_with_integer_nanoseconds(tmp_path: Path) -> None:
    path = _write(
        tmp_path,
        '{"t": 0, "op": "alloc", "id": "a", "bytes": 6291456}',
        "",
        '{"t": 0.05, "op": "alloc", "id": "b", "bytes": 1, "worker": 1}',
        '{"t": 1e-1, "op": "free", "id": "a"}',
        '{"t": 12.000000001, "op": "free", "id": "b"}',
        '{"t": 13, "op": "alloc", "id": "a", "bytes": 256}',
    )
    assert read_trace(path, workers=2) == [
        (0, ALLOC, "a", 6291456, 0),
        (50_000_000, ALLOC, "b", 1, 1),
        (100_000_000, FREE, "a", 0, 0),
        (12_000_000_001, FREE, "b", 0, 0),
        (13_000_000_000, ALLOC, "a", 256, 0),
    ]


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("{", "not a JSON object"),
        ("[1]", "an event is a JSON object, not list"),
        ('{"t": 0, "op": "take", "id": "x"}', "op must be"),
        ('{"t": 0, "op": "alloc", "id": "x", "bytes": 1, "wroker": 1}', "unknown key 'wroker'"),
        ('{"t": 0, "op": "alloc", "id": "x"}', "bytes must be a whole number"),
        ('{"t": 0, "op": "alloc", "id": "x", "bytes": 0}', "bytes must be a whole number"),
        ('{"t": 0, "op": "alloc", "id": "x", "bytes": 1.0}', "bytes must be a whole number"),
        ('{"t": 0, "op": "alloc", "id": "x", "bytes": true}', "bytes must be a whole number"),
        ('{"t": 0, "op": "alloc", "id": "x", "bytes": 1, "worker": 2}', "worker must be a whole number from 0 to 1"),
        ('{"t": 0, "op": "alloc", "id": 7, "bytes": 1}', "id must be a non-empty string"),
        ('{"t": -1, "op": "alloc", "id": "x", "bytes": 1}', "t must be from 0"),
        ('{"t": "0", "op": "alloc", "id": "x", "bytes": 1}', "t must be a number of seconds"),
        ('{"t": NaN, "op": "alloc", "id": "x", "bytes": 1}', "not a JSON object"),
        ('{"t": 1e999, "op": "alloc", "id": "x", "bytes": 1}', "t must be from 0"),
        ('{"t": 0.0000000001, "op": "alloc", "id": "x", "bytes": 1}', "finer than a nanosecond"),
        ('{"t": 0, "op": "free", "id": "nobody"}', "free of unknown id 'nobody'"),
        (b'{"t": 0, "op": "alloc", "id": "\xff", "bytes": 1}', "not a JSON object"),
    ],
)
def test_a_bad_line_is_a_located_error(tmp_path: Path, line: str | bytes, message: str) -> None:
    path = tmp_path / "t.jsonl"
    good = b'{"t": 0, "op": "alloc", "id": "first", "bytes": 1}\n'
    path.write_bytes(good + (line if isinstance(line, bytes) else line.encode()) + b"\n")
    with pytest.raises(TraceError, match=message) as e:
        read_trace(str(path), workers=2)
    assert str(e.value).startswith(f"{path}:2: ")
    assert "\n" not in str(e.value)


@pytest.mark.parametrize(
    ("lines", "message"),
    [
        (['{"t": 1, "op": "alloc", "id": "a", "bytes": 1}', '{"t": 0.5, "op": "free", "id": "a"}'], "sort the trace"),
        (
            ['{"t": 0, "op": "alloc", "id": "a", "bytes": 1}', '{"t": 0, "op": "alloc", "id": "a", "bytes": 1}'],
            "still in flight",
        ),
        (
            [
                '{"t": 0, "op": "alloc", "id": "a", "bytes": 1}',
                '{"t": 0, "op": "free", "id": "a"}',
                '{"t": 0, "op": "free", "id": "a"}',
            ],
            "already freed",
        ),
    ],
)
def test_order_and_lease_errors(tmp_path: Path, lines: list[str], message: str) -> None:
    with pytest.raises(TraceError, match=message) as e:
        read_trace(_write(tmp_path, *lines), workers=1)
    assert f":{len(lines)}: " in str(e.value)


def test_empty_missing_and_directory_traces(tmp_path: Path) -> None:
    with pytest.raises(TraceError, match="no events"):
        read_trace(_write(tmp_path, "", "  "), workers=1)
    with pytest.raises(TraceError, match="cannot open"):
        read_trace(str(tmp_path / "absent.jsonl"), workers=1)
    with pytest.raises(TraceError, match="is a directory"):
        read_trace(str(tmp_path), workers=1)


def test_long_lines_and_too_many_events_are_refused(tmp_path: Path) -> None:
    long = '{"t": 0, "op": "alloc", "id": "' + "x" * tr.MAX_LINE_BYTES + '", "bytes": 1}'
    with pytest.raises(TraceError, match=r":1: line longer than"):
        read_trace(_write(tmp_path, long), workers=1)
    path = tmp_path / "endless"
    path.write_bytes(b"x" * (3 * tr.MAX_LINE_BYTES))  # no newline at all
    with pytest.raises(TraceError, match=r":1: line longer than"):
        read_trace(str(path), workers=1)
    lines = [f'{{"t": 0, "op": "alloc", "id": "{i}", "bytes": 1}}' for i in range(4)]
    with pytest.raises(TraceError, match=r":4: more than 3 events"):
        read_trace(_write(tmp_path, *lines), workers=1, max_events=3)


def test_a_silent_fifo_is_an_error_not_a_hang(tmp_path: Path) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    start = time.monotonic()
    with pytest.raises(TraceError, match="no data for 0.2 s"):
        read_trace(str(fifo), workers=1, idle_timeout=0.2)
    assert time.monotonic() - start < 5


def test_a_fifo_is_read_until_its_writer_closes(tmp_path: Path) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)

    def writer() -> None:
        with open(fifo, "w") as f:
            f.write('{"t": 0, "op": "alloc", "id": "a", "bytes": 1}\n')
            f.flush()
            time.sleep(0.05)
            f.write('{"t": 1, "op": "free", "id": "a"}')  # no final newline

    thread = threading.Thread(target=writer)
    thread.start()
    events = read_trace(str(fifo), workers=1, idle_timeout=5)
    thread.join()
    assert events == [(0, ALLOC, "a", 1, 0), (10**9, FREE, "a", 0, 0)]


def test_stdin_is_read_when_the_path_is_a_dash(monkeypatch: pytest.MonkeyPatch) -> None:
    read, write = os.pipe()
    os.write(write, b'{"t": 0, "op": "alloc", "id": "a", "bytes": 1}\n')
    os.close(write)

    class Stdin:
        def fileno(self) -> int:
            return read

    monkeypatch.setattr(tr.sys, "stdin", Stdin())
    try:
        assert read_trace("-", workers=1) == [(0, ALLOC, "a", 1, 0)]
    finally:
        os.close(read)


@settings(max_examples=300, deadline=None)
@given(
    t=st.one_of(
        st.integers(-5, 2 * 10**9),
        st.decimals(min_value=-1, max_value=10**9 + 1, places=12).map(str),
        st.sampled_from(["1e3", "1.5E-3", "0.000000001", "1.0000000001", '"0.5"', "true", "null"]),
    ),
    op=st.sampled_from(["alloc", "free", "other"]),
    nbytes=st.one_of(st.integers(-1, 2**45), st.sampled_from(["1.0", "true", '"8"'])),
    worker=st.one_of(st.none(), st.integers(-1, 3), st.sampled_from(["true", "1.0"])),
    extra=st.booleans(),
)
def test_the_fast_path_agrees_with_the_careful_one(t, op, nbytes, worker, extra) -> None:
    fields = [f'"t": {t}', f'"op": "{op}"', '"id": "x"']
    if op != "free":
        fields.append(f'"bytes": {nbytes}')
        if worker is not None:
            fields.append(f'"worker": {worker}')
    if extra:
        fields.append('"x": 1')
    line = "{" + ", ".join(fields) + "}"
    fast = tr._fast_event(line.encode(), workers=2)
    try:
        careful = tr._event(tr._DECODER.decode(line), "f:1", workers=2)
    except (TraceError, ValueError):
        careful = None
    if fast is not None:
        assert fast == careful
