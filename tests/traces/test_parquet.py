"""The columnar trace: the same events, ids and errors as the JSON-lines trace, compiled reader or not."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

pa = pytest.importorskip("pyarrow", reason="pyarrow is not installed (pip install '.[parquet]' or '.[test]')")
pq = pytest.importorskip("pyarrow.parquet")
pc = pytest.importorskip("pyarrow.compute")

from mmpool_cli.kernels import native  # noqa: E402
from mmpool_cli.traces.events import ALLOC, FREE, Events  # noqa: E402
from mmpool_cli.traces.parquet_writer import required, write_parquet  # noqa: E402
from mmpool_cli.traces.reader import TraceError, read_trace  # noqa: E402

LOGS = Path(__file__).parent.parent / "engines" / "sglang" / "traffic" / "data" / "sglang-0.5.23"


def timeline(n: int, workers: int = 3, seed: int = 5) -> list:
    """Requests of one to three features on one worker at one t, freed in any order; ids reused."""
    rng = random.Random(seed)
    events, live, t = [], [], 0
    for r in range(n):
        t += rng.choice([0, 1, 1000, 50_000_000, 123_456_789])
        if live and rng.random() < 0.5:
            events.append((t, FREE, live.pop(rng.randrange(len(live))), 0, 0))
            continue
        worker = rng.randrange(workers)
        for k in range(rng.randint(1, 3)):
            key = f"req{r % 40}/img{k}" if rng.random() < 0.9 else f"plain{r}é"  # a non-ASCII id too
            if key in live or any(key == e[2] for e in events[-3:] if e[1] == ALLOC):
                continue
            events.append((t, ALLOC, key, rng.randint(1, 1 << 24), worker))
            live.append(key)
    return events


def jsonl(events: list, path: Path) -> str:
    with path.open("w") as f:
        for t, op, key, nbytes, worker in events:
            stamp = f"{t // 10**9}.{t % 10**9:09d}"
            if op == FREE:
                f.write(json.dumps({"t": 0, "op": "free", "id": key}).replace('"t": 0', f'"t": {stamp}', 1) + "\n")
            else:
                body = {"t": 0, "op": "alloc", "id": key, "bytes": nbytes, "worker": worker}
                f.write(json.dumps(body, ensure_ascii=False).replace('"t": 0', f'"t": {stamp}', 1) + "\n")
    return str(path)


def parquet(events: list, path: Path, items: dict | None = None) -> str:
    with path.open("wb") as f:
        write_parquet(f, events, items or {})
    return str(path)


def columns(ev) -> tuple:
    return tuple(
        None if c is None else list(c)
        for c in (ev.t, ev.op, ev.key, ev.nbytes, ev.worker, ev.group, ev.pack, ev.elem, ev.ids)
    )


@pytest.fixture(params=["compiled", "python"])
def reader(request, monkeypatch):
    if request.param == "compiled" and native.FAST is None:
        pytest.skip("the compiled simulator is not built")
    if request.param == "python":
        monkeypatch.setattr(native, "FAST", None)
    return request.param


@pytest.mark.parametrize("requests", [True, False])
@pytest.mark.parametrize("keep_ids", [True, False])
def test_a_parquet_trace_reads_as_its_json_lines_twin(tmp_path, reader, requests, keep_ids) -> None:
    events = timeline(3000)
    options = {"keep_ids": keep_ids, "requests": requests}
    a = read_trace(jsonl(events, tmp_path / "t.jsonl"), 3, **options)
    b = read_trace(parquet(events, tmp_path / "t.parquet"), 3, **options)
    assert columns(a) == columns(b)
    assert len(b) == len(events)


def bad(tmp_path: Path, events: list, workers: int = 2, **options) -> tuple[str, str]:
    """The errors of the JSON-lines and the Parquet form of ``events``, with the file names cut off."""
    messages = []
    for name, write in (("t.jsonl", jsonl), ("t.parquet", parquet)):
        path = write(events, tmp_path / name)
        with pytest.raises(TraceError) as e:
            read_trace(path, workers, **options)
        messages.append(str(e.value).removeprefix(path))
    return messages[0], messages[1]


@pytest.mark.parametrize(
    ("events", "options", "expected"),
    [
        ([(5, ALLOC, "a", 1, 0), (4, FREE, "a", 0, 0)], {}, ":2: t=0.000000004 s comes before"),
        ([(0, ALLOC, "a", 1, 0), (1, ALLOC, "a", 1, 0)], {}, ":2: alloc of id 'a', which is still in flight"),
        ([(0, ALLOC, "a", 1, 0), (1, FREE, "a", 0, 0), (2, FREE, "a", 0, 0)], {}, ":3: free of id 'a', which was"),
        ([(0, ALLOC, "a", 1, 0), (1, FREE, "b", 0, 0)], {}, ":2: free of unknown id 'b'"),
        ([(0, ALLOC, "a", 1, 0), (1, ALLOC, "b", 1, 1), (2, ALLOC, "c", 1, 0)], {"max_events": 2}, ":3: more than 2"),
        ([(0, ALLOC, "a", 1, 0), (1, ALLOC, "b", 1, 2)], {}, ":2: worker must be a whole number from 0 to 1"),
        ([(0, ALLOC, "a", 1, 0), (1, ALLOC, "b", 1 << 50, 0)], {}, ":2: bytes must be a whole number from 1"),
        ([(0, ALLOC, "a", 1, 0), (1, ALLOC, "x" * 257, 1, 0)], {}, ":2: id must be a non-empty string"),
        # a pairing error on an earlier row comes before a field error on a later one, as in a JSON-lines trace
        ([(0, ALLOC, "a", 1, 0), (1, FREE, "z", 0, 0), (2, ALLOC, "b", 1, 9)], {}, ":2: free of unknown id 'z'"),
    ],
)
def test_a_parquet_trace_is_refused_where_and_as_its_json_lines_twin_is(
    tmp_path, reader, events, options, expected
) -> None:
    from_lines, from_columns = bad(tmp_path, events, **options)
    assert from_columns == from_lines
    assert from_columns.startswith(expected)


def test_columns_a_json_line_could_not_hold_are_refused_by_row(tmp_path, reader) -> None:
    def refused(table) -> str:
        path = tmp_path / "x.parquet"
        path.unlink(missing_ok=True)
        pq.write_table(table, path)
        with pytest.raises(TraceError) as e:
            read_trace(str(path), 2)
        return str(e.value).removeprefix(str(path))

    base = {"t_ns": [0, 1], "op": ["alloc", "free"], "id": ["a", "a"]}
    differs = "; a free's bytes and worker are null or its alloc's"
    assert refused(pa.table({**base, "bytes": [1, 7]})) == f":2: free of id 'a' gives bytes 7, its alloc 1{differs}"
    assert refused(pa.table({**base, "bytes": [1, 1], "worker": [None, 1]})) == (
        f":2: free of id 'a' gives worker 1, its alloc 0{differs}"
    )
    assert (
        refused(pa.table({**base, "bytes": [1, 0]}))
        == ":2: bytes must be a whole number from 1 to 17592186044416, not 0"
    )
    assert refused(pa.table({**base, "bytes": [1, 1], "worker": [1, 2]})) == (
        ":2: worker must be a whole number from 0 to 1 (--workers 2), not 2"
    )
    assert refused(pa.table({**base, "bytes": [1, None], "item": ["x", "x"]})) == (
        ":2: a free's item must be null: its alloc names the item"
    )
    assert refused(pa.table({**base, "op": ["alloc", "take"], "bytes": [1, None]})) == (
        ':2: op must be "alloc" or "free", not \'take\''
    )
    assert refused(pa.table(base)) == ":1: bytes is missing: an alloc event gives the tensor's bytes"
    assert refused(pa.table({**base, "t_ns": [-1, 0], "bytes": [1, None]})).startswith(":1: t_ns must be whole")
    assert refused(pa.table({**base, "size": [1, None]})) == (
        ": unknown column 'size'; a .parquet trace's columns are t_ns, op, id, bytes, worker, item, key"
    )
    assert refused(pa.table({"t_ns": [0], "op": ["alloc"]})).startswith(": no column 'id'")
    assert refused(pa.table({**base, "t_ns": ["0", "1"], "bytes": [1, None]})) == (
        ":1: column t_ns must be an integer, not string"
    )
    assert refused(
        pa.table({"t_ns": pa.array([], pa.int64()), "op": pa.array([], pa.string()), "id": pa.array([], pa.string())})
    ) == (": no events; a .parquet trace holds one row per event")


def test_a_file_that_is_not_parquet_is_one_line(tmp_path) -> None:
    path = tmp_path / "t.parquet"
    path.write_text('{"t": 0, "op": "alloc", "id": "a", "bytes": 1}\n')
    with pytest.raises(TraceError, match=r"t.parquet: not a Parquet trace \("):
        read_trace(str(path), 1)
    with pytest.raises(TraceError, match=r"cannot open the trace \(No such file or directory\)"):
        read_trace(str(tmp_path / "none.parquet"), 1)


def test_trace_writes_parquet_and_simulate_gives_the_json_lines_answer(run_line, tmp_path) -> None:
    log = str(LOGS / "server-json-level2.log")
    for name in ("prod.jsonl", "prod.parquet"):
        result = run_line(
            ["mmpool", "trace", "--model", "qwen2.5-vl", log, "-o", str(tmp_path / name), "--workers", "2"]
        )
        assert result.exit_code == 0, result.output
    assert pq.read_table(tmp_path / "prod.parquet").column("item").to_pylist()[0] == "image 640x480"
    answers = []
    for name in ("prod.jsonl", "prod.parquet"):
        argv = ["mmpool", "simulate", "--trace", str(tmp_path / name), "--workers", "2", "--size", "20MiB"]
        result = run_line([*argv, "--smallest-budget", "--format", "json", "--events"])
        assert result.exit_code in (0, 1), result.output
        data = json.loads(result.stdout)
        data["source"] = None
        answers.append(data)
    assert answers[0] == answers[1]
    assert answers[0]["events"][0]["id"] == "chat-png/0"


def test_parquet_without_pyarrow_is_one_line_naming_the_extra(run_line, tmp_path, monkeypatch) -> None:
    import sys

    monkeypatch.setitem(sys.modules, "pyarrow", None)
    result = run_line(["mmpool", "simulate", "--trace", str(tmp_path / "t.parquet"), "--size", "1GiB"])
    assert result.exit_code == 2
    assert result.stderr.strip().endswith(
        "a .parquet trace needs pyarrow: pip install 'mmpool[parquet]' (or, from an mmpool checkout, pip install '.[parquet]')"
    )


def test_parquet_without_numpy_names_numpy_and_the_extra(run_line, tmp_path, monkeypatch) -> None:
    import sys

    monkeypatch.setitem(sys.modules, "numpy", None)  # pyarrow installs without it; the extra brings it
    result = run_line(["mmpool", "simulate", "--trace", str(tmp_path / "t.parquet"), "--size", "1GiB"])
    assert result.exit_code == 2
    assert result.stderr.strip().endswith(
        "a .parquet trace needs numpy: pip install 'mmpool[parquet]' (or, from an mmpool checkout, pip install '.[parquet]')"
    )


def test_the_compiled_reader_takes_arrow_buffers_as_the_python_reader_takes_rows(tmp_path, monkeypatch) -> None:
    """Column types the compiled reader reads in place (int32, string offsets, op as plain strings, nulls
    in op, non-ASCII ids over 256 bytes, several batches): the same events and errors as the reference."""
    if native.FAST is None:
        pytest.skip("the compiled simulator is not built")
    from mmpool_cli.traces import parquet as trace_parquet

    compiled = native.FAST
    monkeypatch.setattr(trace_parquet, "BATCH_ROWS", 7)  # rows cross batches and batch boundaries
    long_id = "é" * 200  # 400 bytes, 200 characters: allowed
    base = {
        "t_ns": pa.array([0, 1, 1, 2, 3, 5, 8, 8, 9, 10], pa.int64()),
        "op": ["alloc", "alloc", "free", "alloc", "free", "free", "alloc", "alloc", "free", "free"],
        "id": ["a", long_id, "a", "a", long_id, "a", "b", "c", "c", "b"],
        "bytes": pa.array([1, 2, None, 3, None, None, 4, 5, None, None], pa.int32()),
        "worker": pa.array([0, 1, None, None, None, None, 1, 0, None, None], pa.int64()),
        "item": pa.array(["x" * 256, None, None, "", None, None, "i", None, None, None], pa.large_string()),
    }

    def both(table) -> list:
        path = tmp_path / "b.parquet"
        path.unlink(missing_ok=True)
        pq.write_table(table, path)
        found = []
        for fast in (compiled, None):
            monkeypatch.setattr(native, "FAST", fast)
            try:
                found.append(columns(read_trace(str(path), 2, keep_ids=True, requests=True)))
            except TraceError as e:
                found.append(str(e).removeprefix(str(path)))
        assert found[0] == found[1]
        return found[0]

    read = both(pa.table(base))
    codes = pa.array([0 if o == "alloc" else 1 for o in base["op"]], pa.uint8())
    assert both(pa.table({**base, "op": pa.DictionaryArray.from_arrays(codes, pa.array(["alloc", "free"]))})) == read
    assert read[8] == ["a", long_id, "a", "b", "c"] and read[2] == [0, 1, 0, 2, 1, 2, 3, 4, 4, 3]
    for column, row, value, expected in [
        ("op", 4, None, ':5: op must be "alloc" or "free", not None'),
        ("item", 6, "y" * 257, ":7: item must be a string of at most 256 characters"),
        ("id", 8, "", ":9: id must be a non-empty string of at most 256 characters"),
        ("id", 9, "é" * 257, ":10: id must be a non-empty string of at most 256 characters"),
        ("worker", 3, 2, ":4: worker must be a whole number from 0 to 1 (--workers 2), not 2"),
        ("bytes", 9, 1, ":10: free of id 'b' gives bytes 1, its alloc 4; a free's bytes and worker are null or"),
        ("worker", 9, 0, ":10: free of id 'b' gives worker 0, its alloc 1; a free's bytes and worker are null or"),
        ("item", 9, "i", ":10: a free's item must be null: its alloc names the item"),
        ("t_ns", 9, 7, ":10: t=0.000000007 s comes before the previous event's t=0.000000009 s; sort the trace by t"),
        ("id", 9, "c", ":10: free of id 'c', which was already freed"),
    ]:
        values = base[column].to_pylist() if isinstance(base[column], pa.Array) else list(base[column])
        values[row] = value
        kind = base[column].type if isinstance(base[column], pa.Array) else pa.string()
        assert str(both(pa.table({**base, column: pa.array(values, kind)}))).startswith(expected)
    assert both(pa.table(base).slice(3)).startswith(f":2: free of unknown id '{long_id}'")
    # bytes of -2**63 in this loop too: the row check both loops share refuses it, with no overflow
    wide = {**base, "bytes": pa.array([-(1 << 63), 2, None, 3, None, None, 4, 5, None, None], pa.int64())}
    assert str(both(pa.table(wide))).startswith(":1: bytes must be a whole number from 1 to 17592186044416")
    # frees giving their allocs' bytes and worker (as mmpool writes them): the same events as nulls
    given = {**base, "bytes": pa.array([1, 2, 1, 3, 2, 3, 4, 5, 5, 4], pa.int32())}
    assert both(pa.table({**given, "worker": pa.array([0, 1, 0, None, 1, 0, 1, 0, 0, 1], pa.int64())})) == read

    # a slice of a batch (its buffers start past its first row), op dictionary-encoded: as its copy
    import numpy as np

    def one_batch(batch) -> list:
        out = Events(keep_ids=False, requests=False)
        reader = compiled.TraceReader(2, 100, False, False, (out.t, out.op, out.key, out.nbytes, out.worker, None))
        try:
            trace_parquet._batch(np, pa, pc, reader, batch, "b", 1, 2, True)
        except TraceError as e:
            return [str(e)]
        return [list(c) for c in (out.t, out.op, out.key, out.nbytes, out.worker)]

    table = pa.table({**base, "op": pa.array(base["op"]).dictionary_encode()})
    whole = table.to_batches()[0]
    assert trace_parquet._buffers(pa, pc, whole) is not None
    for start in (0, 1, 3, 6):
        part = whole.slice(start)
        copy = pa.RecordBatch.from_pylist(part.to_pylist(), schema=part.schema)
        assert one_batch(part) == one_batch(copy)
    assert one_batch(whole.slice(6)) == [[8, 8, 9, 10], [0, 0, 1, 1], [0, 1, 1, 0], [4, 5, 0, 0], [1, 0, 0, 0]]


def test_integer_ids_are_their_decimal_text(tmp_path, reader) -> None:
    """An id column of integers (as mmpool trace writes ids that all are some): the events, ids and
    errors of the same trace with the ids as text."""
    text = ["5", "-12", "5", "9223372036854775807", "-12", "0", "9223372036854775807", "0"]
    table = {
        "t_ns": [0, 1, 2, 3, 4, 5, 6, 7],
        "op": ["alloc", "alloc", "free", "alloc", "free", "alloc", "free", "free"],
        "bytes": [1, 2, None, 3, None, 4, None, None],
        "worker": [0, 1, None, 1, None, 0, None, None],
    }

    def read(ids, **options):
        path = tmp_path / "i.parquet"
        path.unlink(missing_ok=True)
        pq.write_table(pa.table({**table, "id": ids}), path)
        try:
            return columns(read_trace(str(path), 2, **options))
        except TraceError as e:
            return str(e).removeprefix(str(path))

    as_text = read(pa.array(text), keep_ids=True, requests=True)
    assert as_text[-1] == ["5", "-12", "9223372036854775807", "0"]
    assert read(pa.array([int(i) for i in text], pa.int64()), keep_ids=True, requests=True) == as_text
    small = [str(int(i) % 1000) for i in text]
    assert read(pa.array([int(i) for i in small], pa.int32()), keep_ids=True, requests=True) == read(
        pa.array(small), keep_ids=True, requests=True
    )
    unsigned = [str(int(i) % 2**64) for i in text]  # a type read through pyarrow's cast
    assert read(pa.array([int(i) for i in unsigned], pa.uint64())) == read(pa.array(unsigned))
    for row, value, expected in [
        (2, 7, ":3: free of unknown id '7'"),
        (3, -12, ":4: alloc of id '-12', which is still in flight"),
        (4, 5, ":5: free of id '5', which was already freed"),
        (6, None, ":7: id must be a non-empty string of at most 256 characters"),
    ]:
        ids = [int(i) for i in text]
        ids[row] = value
        assert read(pa.array(ids, pa.int64())) == read(pa.array([None if i is None else str(i) for i in ids]))
        assert read(pa.array(ids, pa.int64())).startswith(expected)
    assert (
        read(pa.array([float(i) for i in text[:2]] * 4)) == ":1: column id must be a string or an integer, not double"
    )


@pytest.mark.parametrize("nulls", [False, True])
def test_the_written_layout_is_checked_row_by_row_as_any_other(tmp_path, monkeypatch, nulls) -> None:
    """The layout mmpool trace writes (integer ids, int32 workers, op a dictionary; a free's bytes and
    worker its alloc's, or null as older traces have them), read by the compiled reader's own loop:
    the events and errors of the pure-Python reader, a wrong row in any place of a batch."""
    if native.FAST is None:
        pytest.skip("the compiled simulator is not built")
    from mmpool_cli.traces import parquet as trace_parquet

    compiled = native.FAST
    monkeypatch.setattr(trace_parquet, "BATCH_ROWS", 150)  # batches of several 64-row blocks, and a rest
    events, live, held = [], [], {}
    rng = random.Random(7)
    for i in range(400):
        if live and rng.random() < 0.45:
            key = live.pop(rng.randrange(len(live)))
            events.append((i, "free", key, *held.pop(key)))
        else:
            held[i] = (rng.randrange(1, 1 << 20), rng.randrange(2))
            live.append(i)
            events.append((i, "alloc", i, *held[i]))
    frees = [op == "free" for _, op, _, _, _ in events]

    def read(changes: dict) -> object:
        cols = [list(c) for c in zip(*events, strict=True)]
        for (name, row), value in changes.items():
            cols[["t_ns", "op", "id", "bytes", "worker"].index(name)][row] = value
        t, op, ids, nbytes, worker = cols
        if nulls:
            kept = [[not f or (name, r) in changes for r, f in enumerate(frees)] for name in ("bytes", "worker")]
            nbytes = [b if keep else None for b, keep in zip(nbytes, kept[0], strict=True)]
            worker = [w if keep else None for w, keep in zip(worker, kept[1], strict=True)]
        words = ["alloc", "free", "take"]
        table = pa.table(
            {
                "t_ns": pa.array(t, pa.int64()),
                "op": pa.DictionaryArray.from_arrays(pa.array([words.index(o) for o in op], pa.int32()), words),
                "id": pa.array(ids, pa.int64()),
                "bytes": pa.array(nbytes, pa.int64()),
                "worker": pa.array(worker, pa.int32()),
            }
        )
        path = tmp_path / "w.parquet"
        path.unlink(missing_ok=True)
        pq.write_table(required(pa, table), path)  # columns without nulls stored as never null, as written
        found = []
        for fast in (compiled, None):
            monkeypatch.setattr(native, "FAST", fast)
            try:
                found.append(columns(read_trace(str(path), 2)))
            except TraceError as e:
                found.append(str(e).removeprefix(str(path)))
        assert found[0] == found[1]
        return found[0]

    whole = read({})
    assert isinstance(whole, tuple) and len(whole[0]) == 400
    free_rows = [r for r, f in enumerate(frees) if f]
    alloc_rows = [r for r, f in enumerate(frees) if not f]
    for row in (0, 63, 64, 149, 150, 151, 299, 399):
        free, alloc = min(free_rows, key=lambda r: abs(r - row)), min(alloc_rows, key=lambda r: abs(r - row))
        for change, expected in [
            ({("op", row): "take"}, f":{row + 1}: op must be"),
            ({("t_ns", row): -1}, f":{row + 1}: t_ns must be"),
            ({("bytes", alloc): 0}, f":{alloc + 1}: bytes must be"),
            ({("bytes", alloc): (1 << 44) + 1}, f":{alloc + 1}: bytes must be"),
            ({("bytes", alloc): -(1 << 63)}, f":{alloc + 1}: bytes must be"),  # no overflow on the way (UBSan)
            ({("bytes", free): -(1 << 63)}, f":{free + 1}: bytes must be"),
            ({("worker", alloc): 2}, f":{alloc + 1}: worker must be"),
            ({("worker", free): -1}, f":{free + 1}: worker must be"),
            ({("bytes", free): events[free][3] + 1}, f":{free + 1}: free of id '{events[free][2]}' gives bytes"),
            ({("worker", free): 1 - events[free][4]}, f":{free + 1}: free of id '{events[free][2]}' gives worker"),
        ]:
            assert str(read(change)).startswith(expected), (change, read(change))
    if nulls:
        assert (
            read({("bytes", alloc_rows[70]): None})
            == f":{alloc_rows[70] + 1}: bytes is missing: an alloc event gives the tensor's bytes"
        )


def test_a_key_column_is_read_and_skipped_by_the_replay(tmp_path) -> None:
    # the items' content keys ('mmpool cache') ride along; the replay reads the trace as without them
    from mmpool_cli.caches.from_trace import read_items
    from mmpool_cli.traces.events import ALLOC, FREE
    from mmpool_cli.traces.parquet_writer import write_parquet
    from mmpool_cli.traces.reader import read_trace

    timeline = [
        (0, ALLOC, "r1/0", 4704, 0),
        (5, FREE, "r1/0", 0, 0),
        (9, ALLOC, "r2/0", 4704, 0),
        (12, FREE, "r2/0", 0, 0),
    ]
    keyed, plain = tmp_path / "k.parquet", tmp_path / "p.parquet"
    with keyed.open("wb") as f:
        write_parquet(f, timeline, {"r1/0": "image 28x28"}, {"r1/0": "abc", "r2/0": "abc"})
    with plain.open("wb") as f:
        write_parquet(f, timeline, {"r1/0": "image 28x28"})
    assert len(read_trace(str(keyed), 1)) == len(read_trace(str(plain), 1)) == 4
    assert [i.key for i in read_items(str(keyed))] == ["abc", "abc"]
    assert [i.key for i in read_items(str(plain))] == [None, None]
