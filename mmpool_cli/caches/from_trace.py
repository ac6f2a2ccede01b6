"""A trace's allocs as the caches see them: each alloc's request, item and content key.

The trace is first read and checked as ``simulate --trace`` reads it (``trace.read_trace``: the same
rules, bounds and messages), then read again for the fields the replay skips: ``item`` (its kind is
the word before the first space) and ``key``. An alloc without a key is an item of unknown content,
taken as used once. Neutral: knows no engine; standard library only (pyarrow for Parquet).
"""

from __future__ import annotations

import json

from mmpool_cli.caches.report import CacheItem
from mmpool_cli.core.bounds import MAX_WORKERS
from mmpool_cli.traces.bounded import IDLE_TIMEOUT_S, TraceError, batches
from mmpool_cli.traces.jsonl import MAX_KEY_CHARS
from mmpool_cli.traces.parquet import is_parquet
from mmpool_cli.traces.reader import read_trace


def request_of(alloc_id: str) -> str:
    """The request an alloc id names: mmpool's traces write ``REQUEST/N``; any other id is its own request."""
    head, sep, tail = alloc_id.rpartition("/")
    return head if sep and tail.isdigit() else alloc_id


def read_items(path: str) -> list[CacheItem]:
    """The allocs of the trace at ``path``, in time order, as cache items.

    Raises:
        TraceError: what ``simulate --trace`` refuses, stdin (read twice), or a bad ``key``.
    """
    if path == "-":
        raise TraceError("--trace -: 'mmpool cache' reads its trace twice; give a file")
    read_trace(path, MAX_WORKERS, keep_ids=False, requests=False)  # every rule simulate applies, first
    if is_parquet(path):
        return _parquet(path)
    out: list[CacheItem] = []
    for first, lines in batches(path, path, IDLE_TIMEOUT_S):
        for n, line in enumerate(lines, first):
            if not line.strip() or b'"alloc"' not in line:
                continue
            obj = json.loads(line)
            if obj.get("op") != "alloc":
                continue
            out.append(_item(obj["id"], obj["bytes"], obj.get("item", ""), obj.get("key"), f"{path}:{n}"))
    return out


def _item(alloc_id: str, nbytes: int, label: str | None, key: object, where: str) -> CacheItem:
    if key is not None and (not isinstance(key, str) or not 0 < len(key) <= MAX_KEY_CHARS):
        raise TraceError(f"{where}: key must be a string of 1 to {MAX_KEY_CHARS} characters (the item's content key)")
    text = label or ""
    return CacheItem(request_of(alloc_id), text.split(" ", 1)[0] if text else "", key or None, nbytes, text)


def _parquet(path: str) -> list[CacheItem]:
    import pyarrow.parquet as pq

    table = pq.read_table(path, columns=None)
    names = table.schema.names
    cols = {name: table.column(name).to_pylist() for name in ("op", "id", "bytes", "item", "key") if name in names}
    n = table.num_rows
    items, keys = cols.get("item", [None] * n), cols.get("key", [None] * n)
    return [
        _item(str(cols["id"][i]), cols["bytes"][i], items[i], keys[i], f"{path}:{i + 1}")
        for i in range(n)
        if cols["op"][i] == "alloc"
    ]
