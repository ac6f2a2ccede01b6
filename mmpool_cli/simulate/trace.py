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

from mmpool_cli.simulate import native
from mmpool_cli.simulate.events import ALLOC, FREE, Event, Events, request_of
from mmpool_cli.simulate.trace_io import IDLE_TIMEOUT_S, MAX_LINE_BYTES, TraceError, batches, chunks
from mmpool_cli.simulate.trace_lines import (
    MAX_ID_CHARS,
    MAX_ITEM_CHARS,
    MAX_T_SECONDS,
    batch_decoder,
    line_event,
    seconds,
)

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
                _extend(out, _columns(events), name, max_events, live, groups, state)
                raise
            parsed = _columns(events)
        _extend(out, parsed, name, max_events, live, groups, state)
    if not len(out):
        raise TraceError(f"{name}: no events; a trace holds one JSON object per line")
    return out


def _columns(events: list[tuple[int, Event]]) -> tuple[list[Any], ...]:
    linenos = [lineno for lineno, _ in events]
    columns = tuple(list(c) for c in zip(*(e for _, e in events), strict=True)) or ([], [], [], [], [])
    return (linenos, *columns)


def _extend(out, parsed, name, max_events, live, groups, state) -> None:  # type: ignore[no-untyped-def]
    """Check a batch's events against what came before and append them to ``out``'s columns."""
    linenos, times, ops, keys, sizes, owners = parsed
    if len(out) + len(times) > max_events:
        room = max_events - len(out)  # the events before the first one too many are checked first
        _extend(out, [c[:room] for c in parsed], name, max_events, live, groups, state)
        raise TraceError(f"{name}:{linenos[room]}: {_TOO_MANY.format(max_events)}")
    serials: list[int] = []
    group_of: list[int] = []
    previous, at, serial = state
    get = live.get
    add_serial, add_group = serials.append, group_of.append
    for i, t in enumerate(times):
        if t < previous:
            raise TraceError(f"{name}:{linenos[i]}: {_refusal(_BACKWARDS, t, previous, None)}")
        previous = t
        key = keys[i]
        found = get(key, -1)
        if ops[i] == ALLOC:
            if found >= 0:
                raise TraceError(f"{name}:{linenos[i]}: {_refusal(_IN_FLIGHT, t, previous, key)}")
            live[key] = serial
            if groups is not None:
                if t != at:
                    groups.clear()
                    at = t
                add_group(groups.setdefault((request_of(key), owners[i]), serial))
            add_serial(serial)
            serial += 1
            continue
        if found < 0:
            code = _FREED if key in live else _UNKNOWN
            raise TraceError(f"{name}:{linenos[i]}: {_refusal(code, t, previous, key)}")
        live[key] = -1
        add_serial(found)
        if groups is not None:
            add_group(-1)
    if out.ids is not None:
        out.ids.extend(k for k, op in zip(keys, ops, strict=True) if op == ALLOC)
    state[:] = [previous, at, serial]
    out.t.extend(times)
    out.op.extend(ops)
    out.key.extend(serials)
    out.nbytes.extend(sizes)
    out.worker.extend(owners)
    if out.group is not None and out.pack is not None and out.elem is not None:
        out.group.extend(group_of)
        out.pack.extend([1 - op for op in ops])  # a trace's features count as image features
        out.elem.extend([1 - op for op in ops])  # of 1-byte elements


# why an event is refused after what came before (the compiled reader's codes)
_BACKWARDS, _IN_FLIGHT, _FREED, _UNKNOWN, _TOO_MANY_CODE = 1, 2, 3, 4, 5
_TOO_MANY = "more than {} events; split the trace or raise --max-events"


def _refusal(code: int, t: int, previous: int, key: object) -> str:
    if code == _BACKWARDS:
        return f"t={seconds(t)} s comes before the previous event's t={seconds(previous)} s; sort the trace by t"
    if code == _IN_FLIGHT:
        return f"alloc of id {key!r}, which is still in flight (its free has not come)"
    if code == _FREED:
        return f"free of id {key!r}, which was already freed"
    return f"free of unknown id {key!r}: no alloc before it names it"


def _read_native(reader: Any, out: Events, path: str, name: str, idle_timeout: float) -> Events:
    """``read_trace`` through the compiled reader, which appends to ``out``'s columns: it takes the
    plain lines, this module the rest."""
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
    if out.pack is not None and out.elem is not None:
        alloc_is_one = bytes(out.op).translate(_NOT)  # a trace's features count as image features of 1-byte elements
        out.pack.frombytes(alloc_is_one)
        out.elem.frombytes(alloc_is_one)
    out.ids = reader.ids()
    return out


_NOT = bytes([1, 0]) + bytes(254)  # ALLOC (0) -> 1, FREE (1) -> 0


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
            if code == _TOO_MANY_CODE:
                raise TraceError(f"{name}:{lineno}: {_TOO_MANY.format(reader.max_events)}")
            if code:
                raise TraceError(f"{name}:{lineno}: {_refusal(code, t, previous, key)}")
        pos = nl + 1
        lineno += 1
