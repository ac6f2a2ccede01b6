"""Reading traces: exact times, located one-line errors, and bounds on size and silence."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mmpool_cli.pools.replay import ALLOC, FREE
from mmpool_cli.traces import bounded as trace_io
from mmpool_cli.traces import jsonl as trace_lines
from mmpool_cli.traces import reader as tr
from mmpool_cli.traces.reader import TraceError, read_trace


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
    assert list(read_trace(path, workers=2).with_ids()) == [
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
        ('{"t": 0, "op": "alloc", "id": "x"}', "bytes is missing"),
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
    events = list(read_trace(str(fifo), workers=1, idle_timeout=5).with_ids())
    thread.join()
    assert events == [(0, ALLOC, "a", 1, 0), (10**9, FREE, "a", 0, 0)]


def test_stdin_is_read_when_the_path_is_a_dash(monkeypatch: pytest.MonkeyPatch) -> None:
    read, write = os.pipe()
    os.write(write, b'{"t": 0, "op": "alloc", "id": "a", "bytes": 1}\n')
    os.close(write)

    class Stdin:
        def fileno(self) -> int:
            return read

    monkeypatch.setattr(trace_io.sys, "stdin", Stdin())
    try:
        assert list(read_trace("-", workers=1).with_ids()) == [(0, ALLOC, "a", 1, 0)]
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
    fast = trace_lines._fast_event(line.encode(), workers=2)
    try:
        careful = trace_lines._event(trace_lines._DECODER.decode(line), "f:1", workers=2)
    except (TraceError, ValueError):
        careful = None
    if fast is not None:
        assert fast == careful


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ('{"t": 0, "op": "alloc", "id": "a", "bytes": 100.0}', "bytes must be a whole number from 1 to"),
        ('{"t": 0, "op": "alloc", "id": "a", "bytes": 100.0}', ", not 100.0"),
        ('{"t": 0, "op": "alloc", "id": "a", "bytes": true}', ", not true"),
        ('{"t": 0, "op": "alloc", "id": "a", "bytes": null}', ", not null"),
        ('{"t": 0, "op": "alloc", "id": "a", "bytes": "6MiB"}', ', not "6MiB"'),
        ('{"t": 0, "op": "alloc", "id": "a"}', "bytes is missing"),
        ('{"t": 0, "op": "alloc", "id": "a", "bytes": 1, "worker": false}', ", not false"),
        ('{"t": true, "op": "free", "id": "a"}', "t must be a number of seconds, not true"),
        ('{"t": 0, "op": "alloc", "id": "a", "bytes": 1, "x": 1}', "unknown key 'x' in an alloc event"),
        ('{"t": 0, "op": "free", "id": "a", "x": 1}', "unknown key 'x' in a free event"),
    ],
)
def test_bad_values_are_quoted_as_json_writes_them(tmp_path: Path, line: str, message: str) -> None:
    with pytest.raises(TraceError) as info:
        read_trace(_write(tmp_path, line), workers=1)
    assert message in str(info.value)
    assert "Decimal(" not in str(info.value)
    assert "True" not in str(info.value)


def test_a_utf8_bom_starts_a_trace_as_it_starts_a_config(tmp_path: Path) -> None:
    path = tmp_path / "bom.jsonl"
    path.write_bytes(b'\xef\xbb\xbf{"t": 0, "op": "alloc", "id": "a", "bytes": 1}\n{"t": 1, "op": "free", "id": "a"}\n')
    assert list(read_trace(str(path), workers=1).with_ids()) == [
        (0, ALLOC, "a", 1, 0),
        (1_000_000_000, FREE, "a", 0, 0),
    ]
    later = tmp_path / "bom-later.jsonl"  # only at the start of the file: elsewhere it is junk
    later.write_bytes(
        b'{"t": 0, "op": "alloc", "id": "a", "bytes": 1}\n\xef\xbb\xbf{"t": 1, "op": "free", "id": "a"}\n'
    )
    with pytest.raises(TraceError, match=r":2: not a JSON object"):
        read_trace(str(later), workers=1)


@pytest.mark.parametrize(
    "line",
    [
        '{"t": 0, "op": "alloc", "id": "a", "bytes": 100, "bytes": 200}',
        '{"t": 0, "op": "alloc", "id": "a:b", "bytes": 100, "bytes": 200}',  # a colon in a string too
        '{"t": 0, "t": 5, "op": "alloc", "id": "a", "bytes": 100}',
        '{"t": 0, "op": "free", "op": "free", "id": "a"}',
    ],
)
def test_a_key_given_twice_is_an_error_as_in_validate(tmp_path: Path, line: str) -> None:
    from mmpool_cli.core.excerpt import duplicate_key

    key = line.split('"')[1] if line.count('"t"') > 1 else ("op" if line.count('"op"') > 1 else "bytes")
    with pytest.raises(TraceError) as info:
        read_trace(_write(tmp_path, '{"t": 0, "op": "alloc", "id": "a", "bytes": 1}', line), workers=1)
    assert str(info.value) == f"{tmp_path / 'trace.jsonl'}:2: {duplicate_key(key)}"


def test_a_long_bad_value_is_quoted_short(tmp_path: Path) -> None:
    line = '{"t": 0, "op": "alloc", "id": "a", "bytes": "' + "9" * 3000 + '"}'
    with pytest.raises(TraceError) as info:
        read_trace(_write(tmp_path, line), workers=1)
    assert "(3,000 characters)" in str(info.value)
    assert len(str(info.value)) < 300


def test_items_are_read_in_batches_and_held_to_their_bounds(tmp_path: Path) -> None:
    plain = [
        f'{{"t": {i}.000000000, "op": "alloc", "id": "r{i}/0", "bytes": 512, "item": "image 1x1"}}' for i in range(50)
    ]
    assert len(read_trace(_write(tmp_path, *plain), workers=1)) == 50
    long = plain[:10] + ['{"t": 10.000000000, "op": "alloc", "id": "x", "bytes": 512, "item": "' + "i" * 257 + '"}']
    with pytest.raises(TraceError, match=r"trace.jsonl:11: item must be a string of at most 256"):
        read_trace(_write(tmp_path, *long), workers=1)
    twice = plain[:10] + ['{"t": 10.000000000, "op": "alloc", "id": "x", "bytes": 512, "item": "a", "item": "b"}']
    with pytest.raises(TraceError, match=r"trace.jsonl:11: .*item"):
        read_trace(_write(tmp_path, *twice), workers=1)


def test_an_allocs_key_is_read_and_an_old_trace_still_is(tmp_path) -> None:
    from mmpool_cli.caches.from_trace import read_items

    path = tmp_path / "t.jsonl"
    path.write_text(
        '{"t": 0, "op": "alloc", "id": "r1/0", "bytes": 4704, "item": "image 28x28", "key": "abc"}\n'
        '{"t": 0.1, "op": "free", "id": "r1/0"}\n'
        '{"t": 0.2, "op": "alloc", "id": "r2/0", "bytes": 4704}\n'
        '{"t": 0.3, "op": "free", "id": "r2/0"}\n'
    )
    assert len(read_trace(str(path), 1)) == 4
    assert [(i.request, i.kind, i.key) for i in read_items(str(path))] == [("r1", "image", "abc"), ("r2", "", None)]
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"t": 0, "op": "alloc", "id": "r1/0", "bytes": 4704, "key": 7}\n')
    with pytest.raises(TraceError, match="key must be a string"):
        read_trace(str(bad), 1)


@pytest.mark.parametrize("compiled", [True, False])
def test_a_recordings_layout_on_the_first_line_is_not_an_event(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, compiled: bool
) -> None:
    from mmpool_cli.kernels import native

    if not compiled:
        monkeypatch.setattr(native, "FAST", None)
    elif native.FAST is None:
        pytest.skip("the compiled reader is not built")
    header = '{"recording": {"pools": 2, "transport": "cuda_ipc", "layout": {"memory_size": 1048576}}}'
    events = ['{"t": 0, "op": "alloc", "id": "a", "bytes": 1, "worker": 1}', '{"t": 1, "op": "free", "id": "a"}']
    assert list(read_trace(_write(tmp_path, header, *events), workers=2).with_ids()) == [
        (0, ALLOC, "a", 1, 1),
        (1_000_000_000, FREE, "a", 0, 0),
    ]
    for lines, where in (((events[0], header, events[1]), 2), (('{"recording": 1}', *events), 1)):
        with pytest.raises(TraceError, match=rf"trace.jsonl:{where}: op must be \"alloc\" or \"free\", not None"):
            read_trace(_write(tmp_path, *lines), workers=2)  # anywhere else, or not an object: not a layout
