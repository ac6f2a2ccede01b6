"""Read a recorded trace: JSON lines of timed alloc and free events, checked and bounded.

One event per line::

    {"t": 0.013, "op": "alloc", "id": "req7/img0", "bytes": 6291456, "worker": 1}
    {"t": 0.020, "op": "free", "id": "req7/img0"}

``t`` is seconds from the start (non-decreasing, exact to the nanosecond), ``worker`` defaults
to 0, and a ``free`` is the last consumer's acknowledgement of that lease. Blank lines are
skipped. Any other line is an error located at ``FILE:LINE``. Reading is bounded: lines are at
most ``MAX_LINE_BYTES``, events at most ``max_events``, and a pipe or FIFO that stays silent
for ``idle_timeout`` seconds is an error rather than a hang.
"""

from __future__ import annotations

import json
import os
import select
import stat
import sys
from collections.abc import Callable, Iterator
from decimal import Decimal, InvalidOperation
from json.scanner import make_scanner
from typing import Any, cast

from mmpool_cli.core.units import NS_PER_S
from mmpool_cli.errors import MmpoolError
from mmpool_cli.simulate.cuda_ipc import MAX_POOL_BYTES
from mmpool_cli.simulate.replay import ALLOC, FREE, Event

MAX_LINE_BYTES = 4096
MAX_EVENTS = 10_000_000
MAX_ID_CHARS = 256
MAX_T_SECONDS = 10**9  # about 32 years: far beyond any recording, and keeps times small integers
IDLE_TIMEOUT_S = 30.0
_CHUNK = 1 << 16
_KEYS = {"alloc": {"t", "op", "id", "bytes", "worker"}, "free": {"t", "op", "id"}}


class TraceError(MmpoolError):
    """A trace that cannot be read or replayed as it stands (exit 2)."""


def _no_constant(name: str) -> object:
    raise ValueError(f"{name} is not a number JSON allows")


class _Float(str):
    """A JSON number with a fraction or exponent, kept as its text so that no float rounds it."""


_DECODER = json.JSONDecoder(parse_float=Decimal, parse_constant=_no_constant)
# the C scanner alone, without decode()'s whitespace regexes: the common line takes this path
# (typeshed types make_scanner's argument as itself; at run time it takes the decoder's settings)
_SCAN: Callable[[str, int], tuple[object, int]] = make_scanner(
    cast(Any, json.JSONDecoder(parse_float=_Float, parse_constant=_no_constant))
)
_MAX_WHOLE_DIGITS = len(str(MAX_T_SECONDS))


def read_trace(
    path: str, workers: int, *, max_events: int = MAX_EVENTS, idle_timeout: float = IDLE_TIMEOUT_S
) -> list[Event]:
    """The events of the trace at ``path`` (``-`` for stdin), checked for ``workers`` pools.

    Raises TraceError, located at ``FILE:LINE``, for the first line that is not a valid event:
    malformed JSON, a missing or unknown key, a time before the previous event's, a worker
    outside ``0..workers-1``, an alloc of an id still in flight, or a free of an id that is not.
    """
    name = "<stdin>" if path == "-" else path
    events: list[Event] = []
    live: set[object] = set()
    seen: set[object] = set()
    previous = 0
    for lineno, raw in _lines(path, name, idle_timeout):
        if len(events) >= max_events:
            if not raw.strip():
                continue
            raise TraceError(f"{name}:{lineno}: more than {max_events} events; split the trace or raise --max-events")
        event = _fast_event(raw, workers)
        if event is None:  # anything unusual: the careful path, which explains what is wrong
            where = f"{name}:{lineno}"
            if not raw.strip():
                continue
            try:
                obj = _DECODER.decode(raw.decode("utf-8"))
            except (ValueError, UnicodeDecodeError) as e:
                raise TraceError(f"{where}: not a JSON object ({_reason(e)})") from None
            event = _event(obj, where, workers)
        t, op, key, nbytes, worker = event
        if t < previous:
            where = f"{name}:{lineno}"
            raise TraceError(
                f"{where}: t={_seconds(t)} s comes before the previous event's t={_seconds(previous)} s; "
                "sort the trace by t"
            )
        previous = t
        if op == ALLOC:
            if key in live:
                where = f"{name}:{lineno}"
                raise TraceError(f"{where}: alloc of id {key!r}, which is still in flight (its free has not come)")
            live.add(key)
            seen.add(key)
        elif key in live:
            live.remove(key)
        elif key in seen:
            raise TraceError(f"{name}:{lineno}: free of id {key!r}, which was already freed")
        else:
            raise TraceError(f"{name}:{lineno}: free of unknown id {key!r}: no alloc before it names it")
        events.append((t, op, key, nbytes, worker))
    if not events:
        raise TraceError(f"{name}: no events; a trace holds one JSON object per line")
    return events


def _fast_event(raw: bytes, workers: int) -> Event | None:
    """The event on a plain, valid line, or None for the careful path to look at."""
    try:
        text = raw.decode("utf-8")
        obj, end = _SCAN(text, 0)
    except (ValueError, UnicodeDecodeError, StopIteration):
        return None
    if end != len(text) or type(obj) is not dict:
        return None
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
    if (
        len(obj) != 4 + ("worker" in obj)
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
        raise TraceError(f"{where}: unknown key {sorted(unknown)[0]!r} in a {op} event; its keys are {allowed}")
    t = _time(obj.get("t"), where)
    key = obj.get("id")
    if not isinstance(key, str) or not 0 < len(key) <= MAX_ID_CHARS:
        raise TraceError(f"{where}: id must be a non-empty string of at most {MAX_ID_CHARS} characters")
    if op == "free":
        return t, FREE, key, 0, 0
    nbytes = obj.get("bytes")
    if type(nbytes) is not int or not 0 < nbytes <= MAX_POOL_BYTES:
        raise TraceError(f"{where}: bytes must be a whole number from 1 to {MAX_POOL_BYTES}, not {nbytes!r}")
    worker = obj.get("worker", 0)
    if type(worker) is not int or not 0 <= worker < workers:
        raise TraceError(
            f"{where}: worker must be a whole number from 0 to {workers - 1} (--workers {workers}), not {worker!r}"
        )
    return t, ALLOC, key, nbytes, worker


def _time(value: object, where: str) -> int:
    if type(value) is int:
        seconds = Decimal(value)
    elif isinstance(value, Decimal):
        seconds = value
    else:
        raise TraceError(f"{where}: t must be a number of seconds, not {value!r}")
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


def _lines(path: str, name: str, idle_timeout: float) -> Iterator[tuple[int, bytes]]:
    """Numbered lines of ``path`` without their newlines, read in bounded chunks."""
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
        lineno = 0
        pending = b""
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
            lines = (pending + chunk).split(b"\n")
            pending = lines.pop()
            for line in lines:
                lineno += 1
                if len(line) > MAX_LINE_BYTES:
                    raise TraceError(f"{name}:{lineno}: line longer than {MAX_LINE_BYTES} bytes")
                yield lineno, line
            if len(pending) > MAX_LINE_BYTES:
                raise TraceError(f"{name}:{lineno + 1}: line longer than {MAX_LINE_BYTES} bytes")
        if pending:
            yield lineno + 1, pending
    finally:
        if owned:
            os.close(fd)
