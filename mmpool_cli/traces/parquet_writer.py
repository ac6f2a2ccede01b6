"""The columnar trace written: ``mmpool trace -o FILE.parquet`` (pyarrow, ``mmpool[parquet]``).

What ``trace_parquet`` reads, written for its size and the speed of reading it back (``write_options``
says how); ids that are all integers' decimal text are stored as integers, and each free's bytes and
worker as its alloc's, so that those columns hold no nulls.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, BinaryIO

from mmpool_cli.traces.events import ALLOC, Event
from mmpool_cli.traces.parquet import BATCH_ROWS, arrow


def write_parquet(
    out: BinaryIO | None, timeline: Iterable[Event], items: dict[object, str], keys: dict[object, str] | None = None
) -> int:
    """Write ``timeline`` (ids as keys) to ``out`` as a columnar trace; returns the number of rows.

    ``out`` None only checks that pyarrow is there (TraceError, naming the extra, if not).
    """
    _, pa, _, pq = arrow("-o FILE.parquet")
    if out is None:
        return 0
    rows = list(timeline)
    allocs = [op == ALLOC for _, op, _, _, _ in rows]
    ids = [str(key) for _, _, key, _, _ in rows]
    numbers = integer_ids(ids)
    sizes: list[int | None] = []
    owners: list[int | None] = []
    held: dict[object, tuple[int | None, int | None]] = {}
    for (_, _, key, n, w), a in zip(rows, allocs, strict=True):
        given = (n, w) if a else held.pop(key, (None, None))  # a free gives its alloc's: no nulls to decode
        if a:
            held[key] = given
        sizes.append(given[0])
        owners.append(given[1])
    table = pa.table(
        {
            "t_ns": pa.array([t for t, _, _, _, _ in rows], pa.int64()),
            "op": pa.array(["alloc" if a else "free" for a in allocs], pa.string()).dictionary_encode(),
            "id": pa.array(ids, pa.string()) if numbers is None else pa.array(numbers, pa.int64()),
            "bytes": pa.array(sizes, pa.int64()),
            "worker": pa.array(owners, pa.int32()),
        }
    )
    named = [items.get(key, "") if a else None for (_, _, key, _, _), a in zip(rows, allocs, strict=True)]
    if any(named):  # with no item named, no column: a trace without one reads as every item ""
        table = table.append_column("item", pa.array(named, pa.string()))
    keyed = [keys.get(key) if a else None for (_, _, key, _, _), a in zip(rows, allocs, strict=True)] if keys else []
    if any(k is not None for k in keyed):  # the items' content keys, where the traffic gave their data
        table = table.append_column("key", pa.array(keyed, pa.string()))
    pq.write_table(required(pa, table), out, **write_options(numeric_ids=numbers is not None))
    return len(rows)


def required(pa: Any, table: Any) -> Any:
    """``table`` with each column that holds no null but item marked as never null: Parquet then stores
    no null flags for them, and they decode about twice as fast."""
    fields = [f.with_nullable(f.name in ("item", "key") or table.column(f.name).null_count > 0) for f in table.schema]
    return table.cast(pa.schema(fields))


def integer_ids(ids: list[str]) -> list[int] | None:
    """The ids as 64-bit integers when every one is exactly an integer's decimal text (``"17"``, not
    ``"017"`` or ``"+17"``), so that reading them back as text gives the same ids; else None."""
    numbers = []
    for key in ids:
        if not key.isascii() or len(key) > 20:
            return None
        try:
            number = int(key)
        except ValueError:
            return None
        if str(number) != key or not -(2**63) <= number < 2**63:
            return None
        numbers.append(number)
    return numbers


def write_options(*, numeric_ids: bool) -> dict[str, Any]:
    """How a columnar trace is written, for the size of the file and the speed of reading it back.

    t_ns as deltas (a time-ordered column's differences are small, and decode faster than a
    dictionary). Ids that are all integers (``mmpool record``'s are) as an int64 column of deltas:
    a free's id is an alloc's of a moment before, so the differences are small, and there is no text
    to decode or hash. Other ids as plain text (each appears twice, so a dictionary of them only grows
    until it falls back to plain), under zstd. The rest as dictionaries; zstd only where it pays (the
    workers and the items): the deltas, op and bytes' dictionary indices do not shrink under it, and
    decompressing them costs time. Row groups of the rows the reader takes at a time: a batch that
    is a whole row group is decoded into buffers sized once, not regrown and copied as it fills.
    """
    return {
        "row_group_size": BATCH_ROWS,
        "column_encoding": {"t_ns": "DELTA_BINARY_PACKED", "id": "DELTA_BINARY_PACKED" if numeric_ids else "PLAIN"},
        "use_dictionary": ["op", "bytes", "worker", "item"],
        "compression": {
            "t_ns": "none",
            "op": "none",
            "id": "none" if numeric_ids else "zstd",
            "bytes": "none",
            "worker": "zstd",
            "item": "zstd",
            "key": "zstd",
        },
    }


__all__ = ["integer_ids", "required", "write_options", "write_parquet"]
