"""One trace line, or a batch of them, as events: JSON checked key by key, ``t`` exact to the nanosecond.

The fast paths (one C scanner call per line, one msgspec call per batch) take only plain, valid
lines; everything else goes to the careful parser, which says what is wrong, located at ``FILE:LINE``.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from decimal import Decimal, InvalidOperation
from json.scanner import make_scanner
from typing import Any, cast

from mmpool_cli.core.excerpt import SHOWN, duplicate_key, shorten
from mmpool_cli.core.units import NS_PER_S
from mmpool_cli.traces.bounded import TraceError
from mmpool_cli.traces.events import ALLOC, FREE, MAX_POOL_BYTES, Event

MAX_ID_CHARS = 256
MAX_ITEM_CHARS = 256
MAX_T_SECONDS = 10**9  # about 32 years: far beyond any recording, and keeps times small integers
# ``offset`` and ``tick``: what the real pool did, in a recording (``simulate.recording``); the replay ignores them
_KEYS = {"alloc": {"t", "op", "id", "bytes", "worker", "item", "key", "offset"}, "free": {"t", "op", "id", "tick"}}
LAYOUT_KEY = "recording"  # a first line {"recording": {...}}: the layout of the recording it was merged from
MAX_KEY_CHARS = 64  # an item's content key (inputs/traffic/content_key.py writes 32 hex digits, or url: and 32)


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
        return _decimal(value)
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


def line_event(raw: bytes, name: str, lineno: int, workers: int) -> Event | None:
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
    if lineno == 1 and type(obj) is dict and list(obj) == [LAYOUT_KEY] and type(obj[LAYOUT_KEY]) is dict:
        return None  # a recording's layout, before its events (simulate reads it: simulate.recording.trace_layout)
    return _event(obj, where, workers)


def batch_decoder() -> Any:
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
        [*fields, ("bytes", int), ("worker", int, 0), ("item", str, ""), ("key", str, "")],
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
            3 if op else 4 + (b'"worker"' in line) + (b'"item"' in line) + (b'"key"' in line)
            for line, op in zip(lines, ops, strict=True)
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
        if max((len(o.key) for o, op in zip(objs, ops, strict=True) if not op), default=0) > MAX_KEY_CHARS:
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
    content = obj.get("key", "")
    if (
        len(obj) != 4 + ("worker" in obj) + ("item" in obj) + ("key" in obj)
        or type(item) is not str
        or len(item) > MAX_ITEM_CHARS
        or type(content) is not str
        or len(content) > MAX_KEY_CHARS
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
    content = obj.get("key", "")
    if not isinstance(content, str) or len(content) > MAX_KEY_CHARS:
        raise TraceError(
            f"{where}: key must be a string of at most {MAX_KEY_CHARS} characters (the item's content key)"
        )
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
        raise TraceError(f"{where}: t must be from 0 to {MAX_T_SECONDS} seconds, not {_json(value)}")
    try:
        ns = seconds.scaleb(9)
        whole = ns.to_integral_value()
    except InvalidOperation:
        raise TraceError(f"{where}: t={_json(value)} is not a usable number of seconds") from None
    if ns != whole:
        raise TraceError(f"{where}: t={_json(value)} is finer than a nanosecond; round it to 9 decimals")
    return int(whole)


def seconds(ns: int) -> str:
    """Nanoseconds as the decimal seconds a trace writes: ``10`` -> ``0.00000001``, never ``1E-8``."""
    whole, frac = divmod(ns, NS_PER_S)
    return f"{whole}.{frac:09d}".rstrip("0").rstrip(".") if frac else str(whole)


def _decimal(value: Decimal) -> str:
    """A JSON number as JSON writes it: plain digits where they are few, else ``1e400`` (not ``1E+400``)."""
    if value.is_finite() and -12 <= value.adjusted() <= 20:
        return f"{value:f}"
    return str(value).lower().replace("e+", "e")


def _reason(e: Exception) -> str:
    if isinstance(e, json.JSONDecodeError):
        return f"{e.msg} at column {e.colno}"
    return str(e).split("\n")[0]
