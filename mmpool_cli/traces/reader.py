"""Read a recorded trace: JSON lines of timed alloc and free events, checked and bounded.

One event per line::

    {"t": 0.013, "op": "alloc", "id": "req7/img0", "bytes": 6291456, "worker": 1}
    {"t": 0.020, "op": "free", "id": "req7/img0"}

An alloc may name its item (``"item": "image 1920x1080"``, at most ``MAX_ITEM_CHARS``); the
replay does not use it. ``t`` is seconds from the start (non-decreasing, exact to the nanosecond), ``worker`` defaults
to 0, and a ``free`` is the last consumer's acknowledgement of that lease. Blank lines are
skipped. Any other line is an error located at ``FILE:LINE``. Reading is bounded: lines are at
most ``MAX_LINE_BYTES``, events at most ``max_events``, and a pipe or FIFO that stays silent
for ``idle_timeout`` seconds is an error rather than a hang.
"""

from __future__ import annotations

from typing import Any

from mmpool_cli.kernels import native
from mmpool_cli.traces.bounded import IDLE_TIMEOUT_S, MAX_LINE_BYTES, TraceError, batches, chunks
from mmpool_cli.traces.events import FREE, Event, Events
from mmpool_cli.traces.jsonl import (
    MAX_ID_CHARS,
    MAX_ITEM_CHARS,
    MAX_T_SECONDS,
    batch_decoder,
    line_event,
)
from mmpool_cli.traces.order import FREED, GONE, TOO_MANY, TOO_MANY_CODE, UNKNOWN, extend, refusal
from mmpool_cli.traces.parquet import is_parquet, read_parquet

__all__ = [
    "IDLE_TIMEOUT_S",
    "MAX_EVENTS",
    "MAX_ID_CHARS",
    "MAX_ITEM_CHARS",
    "MAX_LINE_BYTES",
    "MAX_T_SECONDS",
    "TraceError",
    "read_trace",
]

MAX_EVENTS = 10_000_000


def read_trace(
    path: str,
    workers: int,
    *,
    max_events: int = MAX_EVENTS,
    idle_timeout: float = IDLE_TIMEOUT_S,
    keep_ids: bool = True,
    requests: bool = True,
) -> Events:
    """The events of the trace at ``path`` (``-`` for stdin), checked for ``workers`` pools, as columns.

    Raises TraceError, located at ``FILE:LINE``, for the first line that is not a valid event:
    malformed JSON, a missing or unknown key, a time before the previous event's, a worker
    outside ``0..workers-1``, an alloc of an id still in flight, or a free of an id that is not.
    Keys are numbered per alloc; ``keep_ids`` keeps the trace's ids (``Events.ids``), and
    ``requests`` groups the allocs of one request (cuda_vmm packs them); without it each alloc is
    a request of its own.
    """
    name = "<stdin>" if path == "-" else path
    if is_parquet(path):
        return read_parquet(path, workers, max_events=max_events, keep_ids=keep_ids, requests=requests)
    if native.FAST is not None:
        out = Events(keep_ids=False, requests=requests)
        columns = (out.t, out.op, out.key, out.nbytes, out.worker, out.group)
        reader = native.FAST.TraceReader(workers, max_events, requests, keep_ids, columns)
        return _read_native(reader, out, path, name, idle_timeout)
    out = Events(keep_ids=keep_ids, requests=requests)
    live: dict[object, int] = {}  # id -> its alloc's key while in flight, -1 once freed
    groups: dict[tuple[object, int], int] | None = {} if requests else None
    state = [0, -1, 0]  # the previous t, the t of ``groups``, the next key
    decode = batch_decoder()
    for first, lines in batches(path, name, idle_timeout):
        parsed = decode(first, lines, workers) if decode is not None and lines else None
        if parsed is None:  # the careful path, line by line, which explains what is wrong
            events: list[tuple[int, Event]] = []
            try:
                for lineno, raw in enumerate(lines, first):
                    if e := line_event(raw, name, lineno, workers):
                        events.append((lineno, e))
            except TraceError:  # the lines before it first: an earlier line's error is reported first
                extend(out, _columns(events), name, max_events, live, groups, state)
                raise
            parsed = _columns(events)
        extend(out, parsed, name, max_events, live, groups, state)
    if not len(out):
        raise TraceError(f"{name}: no events; a trace holds one JSON object per line")
    return out


def _columns(events: list[tuple[int, Event]]) -> tuple[list[Any], ...]:
    linenos = [lineno for lineno, _ in events]
    columns = tuple(list(c) for c in zip(*(e for _, e in events), strict=True)) or ([], [], [], [], [])
    return (linenos, *columns)


def replay_lines(
    path: str, workers: int, layout: tuple[int, int, int, int, int], *, max_events: int, idle_timeout: float
) -> Any:
    """The compiled replay of the JSON-lines trace at ``path`` (a file that can be read again), run as its
    lines are read and checked, as ``trace_parquet.replay_parquet`` runs a columnar one."""
    assert native.FAST is not None
    reader = native.FAST.TraceReader(workers, max_events, False, False, (), layout=layout)
    _feed_lines(reader, path, path, idle_timeout)
    return reader.answer()


def _read_native(reader: Any, out: Events, path: str, name: str, idle_timeout: float) -> Events:
    """``read_trace`` through the compiled reader, which appends to ``out``'s columns."""
    _feed_lines(reader, path, name, idle_timeout)
    if out.pack is not None and out.elem is not None:
        alloc_is_one = bytes(out.op).translate(_NOT)  # a trace's features count as image features of 1-byte elements
        out.pack.frombytes(alloc_is_one)
        out.elem.frombytes(alloc_is_one)
    out.ids = reader.ids()
    return out


def _feed_lines(reader: Any, path: str, name: str, idle_timeout: float) -> None:
    """Every line of the trace to the compiled reader: it takes the plain lines, this module the rest."""
    lineno = 1
    pending = b""
    for chunk in chunks(path, name, idle_timeout):
        data = pending + chunk if pending else chunk
        pos, lineno = _feed(reader, data, lineno, name)
        pending = data[pos:]
        if len(pending) > MAX_LINE_BYTES:
            raise TraceError(f"{name}:{lineno}: line longer than {MAX_LINE_BYTES} bytes")
    if pending:
        _feed(reader, pending + b"\n", lineno, name)
    if not reader.events:
        raise TraceError(f"{name}: no events; a trace holds one JSON object per line")


_NOT = bytes([1, 0]) + bytes(254)  # ALLOC (0) -> 1, FREE (1) -> 0


def _allocated_before(path: str, lineno: int, key: object, workers: int) -> bool:
    """Whether a line before ``lineno`` of the trace file at ``path`` allocates ``key`` (those lines
    were read and checked already)."""
    for first, lines in batches(path, path, IDLE_TIMEOUT_S):
        for number, raw in enumerate(lines, first):
            if number >= lineno:
                return False
            event = line_event(raw, path, number, workers)
            if event is not None and event[1] != FREE and event[2] == key:
                return True
    return False


def _feed(reader: Any, data: bytes, lineno: int, name: str) -> tuple[int, int]:
    """Read ``data``'s complete lines; the reader stops at each line the careful parser must see."""
    pos = 0
    workers = reader.workers
    while True:
        pos, lineno, stopped = reader.feed(data, pos, lineno, MAX_LINE_BYTES)
        if not stopped:
            return pos, lineno
        nl = data.find(b"\n", pos)
        raw = data[pos:nl]
        if len(raw) > MAX_LINE_BYTES:
            raise TraceError(f"{name}:{lineno}: line longer than {MAX_LINE_BYTES} bytes")
        event = line_event(raw, name, lineno, workers)
        if event is not None:
            t, op, key, nbytes, worker = event
            code, previous = reader.push(t, op == FREE, key, nbytes, worker)
            if code == TOO_MANY_CODE:
                raise TraceError(f"{name}:{lineno}: {TOO_MANY.format(reader.max_events)}")
            if code == GONE:  # a replaying reader keeps no freed ids: look back for an alloc of this one
                code = FREED if _allocated_before(name, lineno, key, workers) else UNKNOWN
            if code:
                raise TraceError(f"{name}:{lineno}: {refusal(code, t, previous, key)}")
        pos = nl + 1
        lineno += 1
