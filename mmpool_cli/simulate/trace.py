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

import codecs
import json
import os
import select
import stat
import sys
from collections.abc import Callable, Iterator
from decimal import Decimal, InvalidOperation
from json.scanner import make_scanner
from typing import Any, cast

from mmpool_cli.core.excerpt import SHOWN, duplicate_key, shorten
from mmpool_cli.core.units import NS_PER_S
from mmpool_cli.errors import MmpoolError
from mmpool_cli.simulate import native
from mmpool_cli.simulate.cuda_ipc import MAX_POOL_BYTES
from mmpool_cli.simulate.events import ALLOC, FREE, Event, Events, request_of

MAX_LINE_BYTES = 4096
MAX_EVENTS = 10_000_000
MAX_ID_CHARS = 256
MAX_ITEM_CHARS = 256
MAX_T_SECONDS = 10**9  # about 32 years: far beyond any recording, and keeps times small integers
IDLE_TIMEOUT_S = 30.0
_CHUNK = 1 << 18
# ``offset`` and ``tick``: what the real pool did, in a recording (``simulate.recording``); the replay ignores them
_KEYS = {"alloc": {"t", "op", "id", "bytes", "worker", "item", "offset"}, "free": {"t", "op", "id", "tick"}}


class TraceError(MmpoolError):
    """A trace that cannot be read or replayed as it stands (exit 2)."""


def _no_constant(name: str) -> object:
    raise ValueError(f"{name} is not a number JSON allows")


class _DuplicateKey(ValueError):
    """A key given twice in one object: JSON readers keep the last, validate refuses it, so does this."""


def _unique(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    obj = dict(pairs)
    if len(obj) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise _DuplicateKey(key)
            seen.add(key)
    return obj


def _json(value: object) -> str:
    """A value as the trace wrote it (``100.0``, ``true``, ``null``), not as Python shows it."""
    if isinstance(value, Decimal):
        return str(value)
    if isinstance(value, str) and len(value) > SHOWN:
        return f'{json.dumps(value[:SHOWN])[:-1]}…" ({len(value):,} characters)'
    try:
        return shorten(json.dumps(value), 2 * SHOWN)
    except (TypeError, ValueError):  # an object holding a Decimal
        return "an object"


class _Float(str):
    """A JSON number with a fraction or exponent, kept as its text so that no float rounds it."""


_DECODER = json.JSONDecoder(parse_float=Decimal, parse_constant=_no_constant, object_pairs_hook=_unique)
# the C scanner alone, without decode()'s whitespace regexes: the common line takes this path
# (typeshed types make_scanner's argument as itself; at run time it takes the decoder's settings)
_SCAN: Callable[[str, int], tuple[object, int]] = make_scanner(
    cast(Any, json.JSONDecoder(parse_float=_Float, parse_constant=_no_constant))
)
_MAX_WHOLE_DIGITS = len(str(MAX_T_SECONDS))
_SCALE = [10 ** (9 - d) for d in range(10)]  # nanoseconds per unit of the last of d decimals


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
    decode = _batch_decoder()
    for first, lines in _batches(path, name, idle_timeout):
        parsed = decode(first, lines, workers) if decode is not None and lines else None
        if parsed is None:  # the careful path, line by line, which explains what is wrong
            events: list[tuple[int, Event]] = []
            try:
                for lineno, raw in enumerate(lines, first):
                    if e := _line_event(raw, name, lineno, workers):
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
        return f"t={_seconds(t)} s comes before the previous event's t={_seconds(previous)} s; sort the trace by t"
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
    for chunk in _chunks(path, name, idle_timeout):
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
        event = _line_event(raw, name, lineno, workers)
        if event is not None:
            t, op, key, nbytes, worker = event
            code, previous = reader.push(t, op == FREE, key, nbytes, worker)
            if code == _TOO_MANY_CODE:
                raise TraceError(f"{name}:{lineno}: {_TOO_MANY.format(reader.max_events)}")
            if code:
                raise TraceError(f"{name}:{lineno}: {_refusal(code, t, previous, key)}")
        pos = nl + 1
        lineno += 1


def _line_event(raw: bytes, name: str, lineno: int, workers: int) -> Event | None:
    """The event on one line (None for a blank one); TraceError, located, for anything else."""
    event = _fast_event(raw, workers)
    if event is not None:
        return event
    if not raw.strip():
        return None
    where = f"{name}:{lineno}"
    try:
        obj = _DECODER.decode(raw.decode("utf-8"))
    except _DuplicateKey as e:
        raise TraceError(f"{where}: {duplicate_key(str(e))}") from None
    except (ValueError, UnicodeDecodeError) as e:
        raise TraceError(f"{where}: not a JSON object ({_reason(e)})") from None
    return _event(obj, where, workers)


def _batch_decoder() -> Any:
    """A decoder of a batch of plain lines with msgspec, or None without it.

    It returns ``[(lineno, event)]``, or None when any line is not plain (the careful path then
    reads that batch line by line): one msgspec call per batch, typed, and ``t`` kept as its
    text so that no float rounds it.
    """
    try:
        import msgspec
    except ImportError:  # pragma: no cover - msgspec is a dependency; the careful path still works
        return None

    fields: list[Any] = [("t", msgspec.Raw), ("id", str)]
    alloc: Any = msgspec.defstruct(
        "Alloc",
        [*fields, ("bytes", int), ("worker", int, 0), ("item", str, "")],
        tag="alloc",
        tag_field="op",
        forbid_unknown_fields=True,
    )
    free: Any = msgspec.defstruct("Free", fields, tag="free", tag_field="op", forbid_unknown_fields=True)
    decoder: Any = msgspec.json.Decoder(list[alloc | free])
    error = msgspec.DecodeError
    top = MAX_T_SECONDS * NS_PER_S

    def decode(first: int, lines: list[bytes], workers: int):  # type: ignore[no-untyped-def]
        if not all(lines):
            return None  # empty lines: rare, and the careful path skips them
        try:
            objs: list[Any] = decoder.decode(b"[" + b",".join(lines) + b"]")
        except (error, UnicodeDecodeError):
            return None
        # whole-batch checks, column by column: the common trace takes no per-line branch
        texts = [bytes(o.t) for o in objs]  # any JSON value; a number is digits[.digits][e...] or -...
        if uniform := all(len(x) > 10 and x[-10] == 46 for x in texts):  # S.FFFFFFFFF: nanoseconds
            try:
                times = [int(x.replace(b".", b"")) for x in texts]  # not a number: ValueError
            except ValueError:
                return None
        else:
            times = []
            for text in texts:
                if not 48 <= text[0] <= 57 or b"e" in text or b"E" in text:
                    return None  # not a number, a sign or an exponent: the careful path says what is wrong
                dot = text.find(b".")
                if dot < 0:
                    times.append(int(text) * NS_PER_S)
                    continue
                decimals = len(text) - dot - 1
                if decimals > 9 or dot > _MAX_WHOLE_DIGITS:
                    return None
                times.append(int(text[:dot]) * NS_PER_S + int(text[dot + 1 :]) * _SCALE[decimals])
        if min(times) < 0 or max(times) > top:
            return None
        if uniform:
            blob = b"".join(texts)
            if b"e" in blob or b"E" in blob:
                return None
        keys = [o.id for o in objs]
        lengths = [len(k) for k in keys]
        if min(lengths) < 1 or max(lengths) > MAX_ID_CHARS:
            return None
        ops = [FREE if type(o) is free else ALLOC for o in objs]
        # msgspec keeps the last of a key given twice: one colon per key, or the careful path
        # (which refuses the duplicate, or finds the colon inside a string)
        colons = [
            3 if op else 4 + (b'"worker"' in line) + (b'"item"' in line) for line, op in zip(lines, ops, strict=True)
        ]
        if any(line.count(b":") != n for line, n in zip(lines, colons, strict=True)):
            return None
        sizes = [0 if op else o.bytes for o, op in zip(objs, ops, strict=True)]
        owners = [0 if op else o.worker for o, op in zip(objs, ops, strict=True)]
        allocated = [n for n, op in zip(sizes, ops, strict=True) if not op]
        if allocated and (min(allocated) < 1 or max(allocated) > MAX_POOL_BYTES):
            return None
        if min(owners) < 0 or max(owners) >= workers:
            return None
        if max((len(o.item) for o, op in zip(objs, ops, strict=True) if not op), default=0) > MAX_ITEM_CHARS:
            return None
        return range(first, first + len(lines)), times, ops, keys, sizes, owners

    return decode


def _fast_event(raw: bytes, workers: int) -> Event | None:
    """The event on a plain, valid line, or None for the careful path to look at."""
    try:
        text = raw.decode("utf-8")
        obj, end = _SCAN(text, 0)
    except (ValueError, UnicodeDecodeError, StopIteration):
        return None
    if end != len(text) or type(obj) is not dict or text.count(":") != len(obj):
        return None  # one colon per key, or a key may be given twice (or a string holds one): look closer
    key = obj.get("id")
    if type(key) is not str or not 0 < len(key) <= MAX_ID_CHARS:
        return None
    t = obj.get("t")
    if type(t) is int:
        if not 0 <= t <= MAX_T_SECONDS:
            return None
        t *= NS_PER_S
    elif type(t) is _Float:
        whole, _, fraction = t.partition(".")
        if not (fraction.isdigit() and len(fraction) <= 9 and whole.isdigit() and len(whole) <= _MAX_WHOLE_DIGITS):
            return None  # an exponent, a sign, or digits beyond the nanosecond
        t = int(whole) * NS_PER_S + int(fraction.ljust(9, "0"))
        if t > MAX_T_SECONDS * NS_PER_S:
            return None
    else:
        return None
    op = obj.get("op")
    if op == "free":
        return (t, FREE, key, 0, 0) if len(obj) == 3 else None
    if op != "alloc":
        return None
    nbytes = obj.get("bytes")
    worker = obj.get("worker", 0)
    item = obj.get("item", "")
    if (
        len(obj) != 4 + ("worker" in obj) + ("item" in obj)
        or type(item) is not str
        or len(item) > MAX_ITEM_CHARS
        or type(nbytes) is not int
        or not 0 < nbytes <= MAX_POOL_BYTES
        or type(worker) is not int
        or not 0 <= worker < workers
    ):
        return None
    return t, ALLOC, key, nbytes, worker


def _event(obj: object, where: str, workers: int) -> Event:
    if not isinstance(obj, dict):
        raise TraceError(f"{where}: an event is a JSON object, not {type(obj).__name__}")
    op = obj.get("op")
    if op not in _KEYS:
        raise TraceError(f'{where}: op must be "alloc" or "free", not {op!r}')
    unknown = obj.keys() - _KEYS[op]
    if unknown:
        allowed = ", ".join(sorted(_KEYS[op]))
        article = "an" if op == "alloc" else "a"
        raise TraceError(f"{where}: unknown key {sorted(unknown)[0]!r} in {article} {op} event; its keys are {allowed}")
    t = _time(obj.get("t"), where)
    key = obj.get("id")
    if not isinstance(key, str) or not 0 < len(key) <= MAX_ID_CHARS:
        raise TraceError(f"{where}: id must be a non-empty string of at most {MAX_ID_CHARS} characters")
    if op == "free":
        return t, FREE, key, 0, 0
    if "bytes" not in obj:
        raise TraceError(f"{where}: bytes is missing: an alloc event gives the tensor's bytes")
    nbytes = obj["bytes"]
    if type(nbytes) is not int or not 0 < nbytes <= MAX_POOL_BYTES:
        raise TraceError(f"{where}: bytes must be a whole number from 1 to {MAX_POOL_BYTES}, not {_json(nbytes)}")
    item = obj.get("item", "")
    if not isinstance(item, str) or len(item) > MAX_ITEM_CHARS:
        raise TraceError(f"{where}: item must be a string of at most {MAX_ITEM_CHARS} characters ('image 1920x1080')")
    worker = obj.get("worker", 0)
    if type(worker) is not int or not 0 <= worker < workers:
        raise TraceError(
            f"{where}: worker must be a whole number from 0 to {workers - 1} (--workers {workers}), not {_json(worker)}"
        )
    return t, ALLOC, key, nbytes, worker


def _time(value: object, where: str) -> int:
    if type(value) is int:
        seconds = Decimal(value)
    elif isinstance(value, Decimal):
        seconds = value
    else:
        raise TraceError(f"{where}: t must be a number of seconds, not {_json(value)}")
    if not 0 <= seconds <= MAX_T_SECONDS:
        raise TraceError(f"{where}: t must be from 0 to {MAX_T_SECONDS} seconds, not {value}")
    try:
        ns = seconds.scaleb(9)
        whole = ns.to_integral_value()
    except InvalidOperation:
        raise TraceError(f"{where}: t={value} is not a usable number of seconds") from None
    if ns != whole:
        raise TraceError(f"{where}: t={value} is finer than a nanosecond; round it to 9 decimals")
    return int(whole)


def _seconds(ns: int) -> str:
    return str(Decimal(ns).scaleb(-9).normalize()) if ns else "0"


def _reason(e: Exception) -> str:
    if isinstance(e, json.JSONDecodeError):
        return f"{e.msg} at column {e.colno}"
    return str(e).split("\n")[0]


def _batches(path: str, name: str, idle_timeout: float) -> Iterator[tuple[int, list[bytes]]]:
    """Lines of ``path`` without their newlines, a bounded chunk's worth at a time, with the first's number."""
    lineno = 0
    pending = b""
    for chunk in _chunks(path, name, idle_timeout):
        lines = (pending + chunk).split(b"\n")
        pending = lines.pop()
        if max(map(len, lines), default=0) > MAX_LINE_BYTES:
            long = next(i for i, line in enumerate(lines) if len(line) > MAX_LINE_BYTES)
            yield lineno + 1, lines[:long]  # the lines before it first: an earlier error is reported first
            raise TraceError(f"{name}:{lineno + long + 1}: line longer than {MAX_LINE_BYTES} bytes")
        yield lineno + 1, lines
        lineno += len(lines)
        if len(pending) > MAX_LINE_BYTES:
            raise TraceError(f"{name}:{lineno + 1}: line longer than {MAX_LINE_BYTES} bytes")
    if pending:
        yield lineno + 1, [pending]


def _chunks(path: str, name: str, idle_timeout: float) -> Iterator[bytes]:
    """The bytes of ``path`` (``-``: stdin), a bounded chunk at a time, without a leading UTF-8 BOM."""
    if path == "-":
        fd = sys.stdin.fileno()
        if os.isatty(fd):
            raise TraceError("--trace -: stdin is a terminal; pipe a trace into mmpool or give a file")
        owned = False
    else:
        try:
            # non-blocking, so that opening a FIFO with no writer yet does not block
            fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
        except OSError as e:
            raise TraceError(f"{name}: cannot open the trace ({e.strerror})") from None
        owned = True
    try:
        mode = os.fstat(fd).st_mode
        if stat.S_ISDIR(mode):
            raise TraceError(f"{name}: is a directory; give a JSON-lines trace file")
        waits = not stat.S_ISREG(mode)
        pending = b""
        bom_checked = False
        while True:
            if waits and not select.select([fd], [], [], idle_timeout)[0]:
                raise TraceError(f"{name}: no data for {idle_timeout:g} s; is the writer still running?")
            try:
                chunk = os.read(fd, _CHUNK)
            except BlockingIOError:
                continue
            except OSError as e:
                raise TraceError(f"{name}: cannot read the trace ({e.strerror})") from None
            if not chunk:
                break
            if not bom_checked:  # a UTF-8 BOM may start the file, as it may start a config
                head = pending + chunk
                if len(head) < len(codecs.BOM_UTF8) and codecs.BOM_UTF8.startswith(head):
                    pending = head  # too short to tell yet: decide with the next chunk
                    continue
                pending, chunk, bom_checked = b"", head.removeprefix(codecs.BOM_UTF8), True
            yield chunk
        if pending:  # fewer bytes than a BOM: the whole trace
            yield pending
    finally:
        if owned:
            os.close(fd)
