"""The columnar trace: the JSON-lines trace's events as a Parquet table (pyarrow, ``mmpool[parquet]``).

One row per event, in time order, the JSON-lines keys as columns: ``t_ns`` (int64 nanoseconds, so
no decimal text to parse), ``op`` (``"alloc"``/``"free"``), ``id`` (text, or integers standing for
their decimal text, as written when every id is one), and for allocs ``bytes``,
``worker`` (null: 0) and ``item``. A free's ``item`` is null, its ``bytes`` and ``worker`` null or its
alloc's (as mmpool writes them: columns without nulls decode about twice as fast). Every row
is checked as a JSON line is, with the same messages, located at ``FILE:ROW`` (rows counted from 1,
the line numbers of the same trace as JSON lines). The compiled reader (``native.FAST``) checks each
row's fields and pairs allocs with frees in one pass over the columns' Arrow buffers, without a copy
or a Python object per event (``feed_arrow``; a column of another type is converted and checked
with pyarrow first); the messages are written here, and the pure-Python reader, the reference,
takes the rows one by one.
"""

from __future__ import annotations

from typing import Any

from mmpool_cli.core.units import NS_PER_S
from mmpool_cli.kernels import native
from mmpool_cli.traces.bounded import TraceError
from mmpool_cli.traces.events import ALLOC, FREE, MAX_POOL_BYTES, Events
from mmpool_cli.traces.jsonl import MAX_ID_CHARS, MAX_ITEM_CHARS, MAX_T_SECONDS
from mmpool_cli.traces.order import (
    DIFFERS,
    FIELD,
    FREED,
    GONE,
    TOO_MANY,
    TOO_MANY_CODE,
    UNKNOWN,
    PythonColumns,
    differs,
    refusal,
)

PARQUET_EXTRA = "pip install 'mmpool[parquet]' (or, from an mmpool checkout, pip install '.[parquet]')"
COLUMNS = ("t_ns", "op", "id", "bytes", "worker", "item", "key")
REPLAYED = COLUMNS[:-1]  # the item's content key (an alloc's, optional) is for 'mmpool cache': the replay skips it
REQUIRED = ("t_ns", "op", "id")
BATCH_ROWS = 1 << 17  # a batch that fits in cache: larger ones cost fresh pages (zeroed by the kernel) per batch


def is_parquet(path: str) -> bool:
    """Whether ``path`` names a columnar trace (by its name, as ``--plot`` takes its format)."""
    return path.lower().endswith(".parquet")


def arrow(what: str) -> tuple[Any, Any, Any, Any]:
    """numpy, pyarrow, pyarrow.compute (imported when first used) and pyarrow.parquet, or a
    TraceError naming the extra that brings them."""
    try:
        import numpy as np
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError as e:  # the extra brings both: say which one is missing
        raise TraceError(f"{what} needs {'numpy' if e.name == 'numpy' else 'pyarrow'}: {PARQUET_EXTRA}") from None
    return np, pa, _Compute(), pq


class _Compute:
    """``pyarrow.compute``, imported when first used: reading through the buffers needs none of it,
    and its import costs 20 to 40 ms of a run."""

    def __getattr__(self, name: str) -> Any:
        import pyarrow.compute as pc

        return getattr(pc, name)


def read_parquet(path: str, workers: int, *, max_events: int, keep_ids: bool, requests: bool) -> Events:
    """The events of the columnar trace at ``path``, checked as ``trace.read_trace`` checks JSON lines."""
    fast = native.FAST is not None
    out = Events(keep_ids=keep_ids and not fast, requests=requests)
    if fast:
        assert native.FAST is not None
        columns = (out.t, out.op, out.key, out.nbytes, out.worker, out.group)
        reader: Any = native.FAST.TraceReader(workers, max_events, requests, keep_ids, columns)
    else:
        reader = PythonColumns(out, path, max_events, requests)
    _feed(path, reader, workers, fast)
    if not len(out):
        raise TraceError(f"{path}: no events; a .parquet trace holds one row per event")
    if fast and out.pack is not None and out.elem is not None:  # the Python reader fills them as it goes
        alloc_is_one = bytes(out.op).translate(bytes([1, 0]) + bytes(254))
        out.pack.frombytes(alloc_is_one)  # a trace's features count as image features of 1-byte elements
        out.elem.frombytes(alloc_is_one)
    if fast:
        out.ids = reader.ids()
    return out


# what the compiled replay returns: (events, t, stopped, slack, enough, per-worker rows, offsets, workers)
Answer = tuple[int, int, int, int, int, list[tuple[int, ...]], Any, Any]


def replay_parquet(path: str, workers: int, layout: tuple[int, int, int, int, int], *, max_events: int) -> Answer:
    """The compiled replay of the columnar trace at ``path``, run as its rows are read and checked (the
    rows, their errors and the answer all as ``read_parquet`` then ``replay``), in the memory of the
    leases in flight rather than of the trace. ``layout``: (memory_size, data_start, recycle_ns,
    alignment, max_leases) of each of the ``workers`` pools; needs ``native.FAST``."""
    assert native.FAST is not None
    reader = native.FAST.TraceReader(workers, max_events, False, False, (), layout=layout)
    _feed(path, reader, workers, True)
    if not reader.events:
        raise TraceError(f"{path}: no events; a .parquet trace holds one row per event")
    answer: Answer = reader.answer()
    return answer


def _feed(path: str, reader: Any, workers: int, fast: bool) -> None:
    """Check the rows of the columnar trace at ``path`` and hand them to ``reader``, batch by batch."""
    np, pa, pc, pq = arrow(f"{path}: a .parquet trace")
    try:
        # column chunks read through one small buffer, not whole, and not kept once read (pre-buffered,
        # pyarrow keeps every chunk of the file until the end: the whole file in memory)
        source = pq.ParquetFile(path, buffer_size=1 << 16, pre_buffer=False)
    except FileNotFoundError:
        raise TraceError(f"{path}: cannot open the trace (No such file or directory)") from None
    except IsADirectoryError:
        raise TraceError(f"{path}: is a directory; give a trace file") from None
    except (OSError, pa.ArrowException) as e:
        raise TraceError(f"{path}: not a Parquet trace ({str(e).splitlines()[0][:200]})") from None
    names = source.schema_arrow.names
    unknown = [c for c in names if c not in COLUMNS]
    missing = [c for c in REQUIRED if c not in names]
    if unknown or missing:
        wrong = f"unknown column {unknown[0]!r}" if unknown else f"no column {missing[0]!r}"
        raise TraceError(f"{path}: {wrong}; a .parquet trace's columns are {', '.join(COLUMNS)}")
    first = 1
    try:
        batches = source.iter_batches(
            batch_size=BATCH_ROWS, columns=[c for c in REPLAYED if c in names], use_threads=False
        )  # one core: the replay after it is single-threaded too
        for batch in batches:
            _batch(np, pa, pc, reader, batch, path, first, workers, fast)
            first += batch.num_rows
    except (OSError, pa.ArrowException) as e:
        raise TraceError(f"{path}: cannot read the trace ({str(e).splitlines()[0][:200]})") from None


def _column(pa: Any, pc: Any, batch: Any, name: str, kind: Any) -> Any:
    if name not in batch.schema.names:
        return pa.nulls(batch.num_rows, kind)
    col = batch.column(name)
    if pa.types.is_dictionary(col.type):
        col = col.dictionary_decode()
    if name == "id" and pa.types.is_integer(col.type):
        return col.cast(kind)  # ids stored as integers: their decimal text
    ok = (
        pa.types.is_integer(col.type)
        if pa.types.is_integer(kind)
        else pa.types.is_string(col.type) or (pa.types.is_large_string(col.type))
    )
    if not ok:
        return col  # the row checks below say what is wrong with its first value
    return col.cast(kind)


def _batch(np: Any, pa: Any, pc: Any, reader: Any, batch: Any, path: str, first: int, workers: int, fast: bool) -> None:
    """Check one batch's rows column by column, then add the rows before the first bad one."""
    if not batch.num_rows:
        return
    specs = _buffers(pa, pc, batch) if fast else None
    if specs is not None:  # the compiled reader checks and pairs the rows straight from Arrow's buffers
        done, code, previous = reader.feed_arrow(batch.num_rows, *specs)
        if code == FIELD:
            raise TraceError(f"{path}:{first + done}: {_row_error(pa, done, _decoded(pa, pc, batch), workers)}")
        if code:
            t, key = batch.column("t_ns")[done].as_py(), batch.column("id")[done].as_py()
            b, w = (batch.column(c)[done].as_py() if c in batch.schema.names else None for c in ("bytes", "worker"))
            _refuse(reader, path, first + done, code, t, previous, str(key), (b or 0, -1 if w is None else w))
        return
    n = batch.num_rows
    cols = _decoded(pa, pc, batch)
    t, op, ids, nbytes, worker = (cols[k] for k in ("t", "op", "id", "bytes", "worker"))
    bad = _first_bad(pa, pc, cols, workers)
    good = n if bad is None else bad
    is_free = pc.fill_null(pc.equal(op, "free"), False).to_numpy(zero_copy_only=False)[:good].astype(np.int8)
    if good:
        head = [c.slice(0, good) for c in (t, ids, nbytes, worker)]
        times = head[0].to_numpy(zero_copy_only=False).astype(np.int64)
        sizes = pc.fill_null(head[2], 0).to_numpy(zero_copy_only=False).astype(np.int64)
        owners = pc.fill_null(head[3], -1).to_numpy(zero_copy_only=False).astype(np.int64)
        owners[(owners < 0) & (is_free == 0)] = 0  # an alloc's null worker is 0; a free's gives none (-1)
        if fast:
            id_col = head[1]
            offsets = np.frombuffer(id_col.buffers()[1], np.int64, good + 1, id_col.offset * 8)
            data = id_col.buffers()[2] or b""
            done, code, previous = reader.feed_columns(times, is_free, offsets, data, sizes, owners)
            if code:
                given = (int(sizes[done]), int(owners[done]))
                _refuse(reader, path, first + done, code, int(times[done]), previous, id_col[done].as_py(), given)
        else:
            reader.add(first, times.tolist(), is_free.tolist(), head[1].to_pylist(), sizes.tolist(), owners.tolist())
    if bad is not None:
        raise TraceError(f"{path}:{first + bad}: {_row_error(pa, bad, cols, workers)}")


def _decoded(pa: Any, pc: Any, batch: Any) -> dict[str, Any]:
    """The batch's columns decoded and widened, for the checks with pyarrow and the error messages."""
    return {
        "t": _column(pa, pc, batch, "t_ns", pa.int64()),
        "op": _column(pa, pc, batch, "op", pa.large_string()),
        "id": _column(pa, pc, batch, "id", pa.large_string()),
        "bytes": _column(pa, pc, batch, "bytes", pa.int64()),
        "worker": _column(pa, pc, batch, "worker", pa.int64()),
        "item": _column(pa, pc, batch, "item", pa.large_string()),
    }


def _buffers(pa: Any, pc: Any, batch: Any) -> tuple[Any, ...] | None:
    """The batch's columns as the compiled reader takes them, Arrow's own buffers (no copy), or None
    when a column's type needs converting first (the path through pyarrow takes those)."""
    present = batch.schema.names
    specs: list[Any] = []
    for name, strings in (("t_ns", False), ("id", True), ("bytes", False), ("worker", False), ("item", True)):
        if name not in present:
            specs.append(None)
            continue
        col = batch.column(name)
        kind = col.type
        if strings and (pa.types.is_string(kind) or pa.types.is_large_string(kind)):
            valid, offsets, data = col.buffers()
            specs.append((valid, col.offset, offsets, 8 if pa.types.is_large_string(kind) else 4, data or b""))
        elif (not strings or name == "id") and (pa.types.is_int64(kind) or pa.types.is_int32(kind)):
            valid, values = col.buffers()
            specs.append((valid, col.offset, values, kind.bit_width // 8, None))
        else:
            return None
    op = _op_codes(pa, pc, batch.column("op"))
    if op is None:
        return None
    return (specs[0], op, *specs[1:])


def _op_codes(pa: Any, pc: Any, col: Any) -> Any:
    """The op column as the compiled reader takes it: its dictionary's indices, each word's code (0
    alloc, 1 free, 2 anything else) as their data; None if its type is not a string's."""
    if pa.types.is_string(col.type) or pa.types.is_large_string(col.type):
        col = pc.dictionary_encode(col)
    kind = col.type
    if (
        not pa.types.is_dictionary(kind)
        or not pa.types.is_signed_integer(kind.index_type)
        or not (pa.types.is_string(kind.value_type) or pa.types.is_large_string(kind.value_type))
    ):
        return None
    words = bytes({"alloc": 0, "free": 1}.get(v, 2) for v in col.dictionary.to_pylist())
    indices = col.indices
    if kind.index_type.bit_width < 32:
        indices = indices.cast(pa.int32())  # the reader takes 4- and 8-byte integers
    valid, values = indices.buffers()
    return (valid, indices.offset, values, indices.type.bit_width // 8, words)


def _refuse(
    reader: Any, path: str, row: int, code: int, t: int, previous: int, key: object, given: tuple[int, int]
) -> None:
    """Raise the refusal of row ``row`` (``code``, the compiled reader's); ``given``: its bytes and
    worker (0 and -1: none)."""
    if code == TOO_MANY_CODE:
        raise TraceError(f"{path}:{row}: {TOO_MANY.format(reader.max_events)}")
    if code == DIFFERS:
        alloc = _alloc_before(path, row, key)
        assert alloc is not None  # the reader found it in flight
        raise TraceError(f"{path}:{row}: {differs(key, *given, alloc)}")
    if code == GONE:  # a replaying reader keeps no freed ids: look back for an alloc of this one
        code = FREED if _alloc_before(path, row, key) else UNKNOWN
    raise TraceError(f"{path}:{row}: {refusal(code, t, previous, key)}")


def _alloc_before(path: str, row: int, key: object) -> tuple[int, int] | None:
    """The bytes and worker of the last row before ``row`` (counted from 1) of the trace at ``path`` that
    allocates ``key``, or None; the rows before it were read and checked already, so their columns
    have the types a trace's have."""
    _, pa, pc, pq = arrow(path)
    source = pq.ParquetFile(path, buffer_size=1 << 16, pre_buffer=False)
    names = [c for c in ("op", "id", "bytes", "worker") if c in source.schema_arrow.names]
    left, found = row - 1, None
    for batch in source.iter_batches(batch_size=BATCH_ROWS, columns=names, use_threads=False):
        if left <= 0:
            break
        part = batch.slice(0, left)
        left -= part.num_rows
        op, ids = _column(pa, pc, part, "op", pa.large_string()), _column(pa, pc, part, "id", pa.large_string())
        rows = pc.indices_nonzero(pc.and_(pc.equal(op, "alloc"), pc.equal(ids, pa.scalar(key, pa.large_string()))))
        if len(rows):
            at = rows[-1].as_py()
            worker = _column(pa, pc, part, "worker", pa.int64())[at].as_py()
            found = (_column(pa, pc, part, "bytes", pa.int64())[at].as_py(), worker or 0)
    return found


def _first_bad(pa: Any, pc: Any, cols: dict[str, Any], workers: int) -> int | None:
    """The index of the first row with a field a JSON line could not have, or None."""
    t, op, ids, nbytes, worker, item = (cols[k] for k in ("t", "op", "id", "bytes", "worker", "item"))
    if not all(pa.types.is_integer(c.type) for c in (t, nbytes, worker)) or not all(
        pa.types.is_large_string(c.type) for c in (op, ids, item)
    ):
        return 0
    alloc = pc.equal(op, "alloc")
    free = pc.equal(op, "free")
    known = pc.fill_null(pc.or_(alloc, free), False)
    alloc = pc.fill_null(alloc, False)
    free = pc.fill_null(free, False)
    top = MAX_T_SECONDS * NS_PER_S
    id_len = pc.utf8_length(ids)
    item_len = pc.fill_null(pc.utf8_length(item), 0)
    size_ok = pc.and_(pc.greater_equal(nbytes, 1), pc.less_equal(nbytes, MAX_POOL_BYTES))
    owner = pc.fill_null(worker, 0)
    checks = [  # a free's bytes and worker may be null, and are checked as an alloc's where not
        known,
        pc.fill_null(pc.and_(pc.greater_equal(t, 0), pc.less_equal(t, top)), False),
        pc.fill_null(pc.and_(pc.greater_equal(id_len, 1), pc.less_equal(id_len, MAX_ID_CHARS)), False),
        pc.or_(pc.and_(free, pc.is_null(nbytes)), pc.fill_null(size_ok, False)),
        pc.and_(pc.greater_equal(owner, 0), pc.less(owner, workers)),
        pc.or_(free, pc.less_equal(item_len, MAX_ITEM_CHARS)),
        pc.or_(alloc, pc.is_null(item)),
    ]
    ok = checks[0]
    for check in checks[1:]:
        ok = pc.and_(ok, check)
    if pc.all(ok).as_py() is not False:
        return None
    return int(pc.index(ok, False).as_py())


def _row_error(pa: Any, i: int, cols: dict[str, Any], workers: int) -> str:
    """What is wrong with row ``i``, in the JSON-lines reader's words where the field is the same."""
    from mmpool_cli.traces.jsonl import _json

    t, op, ids, nbytes, worker, item = (cols[k] for k in ("t", "op", "id", "bytes", "worker", "item"))

    for name, col, kind in (
        ("t_ns", t, "an integer"),
        ("bytes", nbytes, "an integer"),
        ("worker", worker, "an integer"),
    ):
        if not pa.types.is_integer(col.type):
            return f"column {name} must be {kind}, not {col.type}"
    for name, col in (("op", op), ("id", ids), ("item", item)):
        if not pa.types.is_large_string(col.type):
            return f"column {name} must be a string{' or an integer' if name == 'id' else ''}, not {col.type}"
    o = op[i].as_py()
    if o not in ("alloc", "free"):
        return f'op must be "alloc" or "free", not {o!r}'
    tv = t[i].as_py()
    if tv is None or not 0 <= tv <= MAX_T_SECONDS * NS_PER_S:
        return f"t_ns must be whole nanoseconds from 0 to {MAX_T_SECONDS * NS_PER_S}, not {_json(tv)}"
    key = ids[i].as_py()
    if not isinstance(key, str) or not 0 < len(key) <= MAX_ID_CHARS:
        return f"id must be a non-empty string of at most {MAX_ID_CHARS} characters"
    b, w, it = nbytes[i].as_py(), worker[i].as_py(), item[i].as_py()
    if o == "free" and it is not None:
        return "a free's item must be null: its alloc names the item"
    if b is None and o == "alloc":
        return "bytes is missing: an alloc event gives the tensor's bytes"
    if b is not None and not 0 < b <= MAX_POOL_BYTES:
        return f"bytes must be a whole number from 1 to {MAX_POOL_BYTES}, not {_json(b)}"
    if o == "alloc" and it is not None and len(it) > MAX_ITEM_CHARS:
        return f"item must be a string of at most {MAX_ITEM_CHARS} characters ('image 1920x1080')"
    return f"worker must be a whole number from 0 to {workers - 1} (--workers {workers}), not {_json(w)}"


__all__ = ["ALLOC", "COLUMNS", "FREE", "is_parquet", "read_parquet", "replay_parquet"]
