"""SGLang 0.5.23's server log -> requests with their image references, Finish times and queue waits.

``--log-requests`` writes, inside the server's whole log (every other line is skipped and counted):

* ``--log-requests-format text``: ``[YYYY-mm-dd HH:MM:SS] Receive: obj=GenerateReqInput(...)``,
  ``Receive OpenAI: obj={...}``, ``Finish: obj=..., out=...`` (``utils/request_logger.py:99-188``;
  its formatter stamps whole seconds, ``utils/log_utils.py:50-57``);
* ``--log-requests-format json``: the same prefix, then ``{"timestamp": ISO-8601, "event":
  "request.received" | "request.received.openai" | "request.finished", "rid": ..., "obj": ...}``
  (``utils/log_utils.py:60-74``).

Level 2 keeps strings up to 2048 characters; json cuts longer ones to their first 1024 characters,
``...`` and their last 1024, text prints a long single string as ``'start' ... 'end'`` and a list
whole. Level 3 keeps everything; levels 0 and 1 drop ``image_data`` (``request_logger.py:197-239``).
``--enable-request-time-stats-logging`` adds ``ReqTimeStats(rid=...): queue_duration=...ms, ...``
(``managers/schedule_batch.py:2199-2219``). Pure core: standard library only.
"""

from __future__ import annotations

import calendar
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal, InvalidOperation
from typing import Any

from mmpool_cli.engines.sglang.traffic import pyrepr
from mmpool_cli.inputs.traffic.lines import open_lines
from mmpool_cli.inputs.traffic.model import NS_PER_S, ItemRef, Request, Summary
from mmpool_cli.inputs.traffic.prompts import Prompt, usage_of

CUT_HALF = 1024  # json level 2: max_length 2048 // 2 characters kept at each end
_STAMP = re.compile(rb"\[(\d{4})-(\d\d)-(\d\d) (\d\d):(\d\d):(\d\d)(?:[.,](\d{1,6}))?")
_ANY_STAMP = re.compile(rb"(?m)^\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d")  # a line of the server's log
_TIME_STATS = re.compile(r"ReqTimeStats\(rid=([^,)\s]+).*?\): queue_duration=(-?[0-9.]+)ms")
_WARMUP_TEXT = "Describe the image."
_WARMUP_BYTES = _WARMUP_TEXT.encode()
LEVELS_HINT = (
    "restart the server with --log-requests --log-requests-level 2 (json cuts each string to its first and "
    "last 1024 characters) or 3 (everything), e.g. --log-requests-format json"
)


@dataclass(frozen=True)
class Finished:
    rid: str
    t_ns: int
    # its ``meta_info``'s prompt_tokens, completion_tokens and cached_tokens (json format), where given
    usage: tuple[int | None, int | None, int | None] = (None, None, None)


@dataclass(frozen=True)
class Queued:
    rid: str
    queue_ns: int


@dataclass(frozen=True)
class Problem:
    where: str
    code: str
    message: str


Record = Request | Finished | Queued | Problem


def looks_like(first: bytes) -> bool:
    """Whether the start of a file reads as an SGLang server log (for ``--from auto``)."""
    markers = (b"Receive: obj=GenerateReqInput(", b'"event": "request.')
    return bool(_ANY_STAMP.search(first)) or any(m in first for m in markers)


def read(path: str, summary: Summary) -> Iterator[Record]:
    """The records of the log at ``path``; lines skipped are counted in ``summary.skipped``."""
    warmup_next = False
    first_request = True
    for lineno, raw in open_lines(path):
        where = f"{path}:{lineno}"
        if raw is None:
            yield Problem(where, "traffic-line-too-long", "a line longer than 256 MiB; it was skipped")
            continue
        kind = _kind(raw)
        if kind is None:
            summary.skipped["unrelated to requests"] += 1
            continue
        try:
            line = raw.decode("utf-8")
        except UnicodeDecodeError:
            summary.skipped["not UTF-8"] += 1
            continue
        if kind in ("openai", "openai-json"):
            if not first_request or _WARMUP_BYTES not in raw:
                # only SGLang's warm-up needs reading: the Receive line after it sizes every request
                summary.skipped["Receive OpenAI (the Receive line that follows sizes it)"] += 1
                continue
            kind = "json" if kind == "openai-json" else kind
        stamp = _stamp(raw)
        try:
            if kind == "stats":
                m = _TIME_STATS.search(line)
                if m is None:
                    summary.skipped["ReqTimeStats without queue_duration"] += 1
                    continue
                yield Queued(m.group(1), _ms_ns(m.group(2)))
                continue
            out: Any = None
            if kind == "json":
                event, obj, rid, stamp, out = _json_event(line, stamp)
            else:
                event, obj, rid = _text_event(line, kind)
        except (ValueError, pyrepr.ReprError) as e:
            yield Problem(where, "traffic-log-line", f"a request line mmpool cannot read ({e}); it was skipped")
            continue
        if stamp is None:
            yield Problem(where, "traffic-log-time", "a request line without a time stamp; it was skipped")
            continue
        if event == "openai":
            summary.skipped["Receive OpenAI (the Receive line that follows sizes it)"] += 1
            warmup_next = _is_warmup_body(obj) and first_request
            continue
        if event == "finish":
            outs = out if isinstance(out, list) else [out]
            for i, r in enumerate(_rids(rid)):
                meta = outs[i].get("meta_info") if i < len(outs) and isinstance(outs[i], dict) else None
                yield Finished(r, stamp, usage_of(meta))
            continue
        if not isinstance(obj, dict) or not ("image_data" in obj or "video_data" in obj):
            summary.skipped["Receive without image_data (--log-requests-level 0 or 1)"] += 1
            continue
        for request in _requests(obj, rid, stamp, where):
            request.warmup = warmup_next
            request.coarse = kind != "json"  # the request logger's text formatter stamps whole seconds
            yield request
        warmup_next = False
        first_request = False


def _kind(raw: bytes) -> str | None:
    if b"Receive: obj=" in raw:
        return "receive"
    if b"Finish: obj=" in raw:
        return "finish"
    if b"Receive OpenAI: obj=" in raw:
        return "openai"
    if b'"event": "request.received.openai"' in raw:
        return "openai-json"
    if b'"event": "request.' in raw:
        return "json"
    if b"ReqTimeStats(rid=" in raw:
        return "stats"
    return None


def _stamp(raw: bytes) -> int | None:
    m = _STAMP.match(raw)
    if m is None:
        return None
    y, mo, d, h, mi, s = (int(g) for g in m.groups()[:6])
    frac = m.group(7)
    ns = int(frac.decode().ljust(9, "0")) if frac else 0
    return calendar.timegm((y, mo, d, h, mi, s, 0, 0, 0)) * NS_PER_S + ns


def _ms_ns(text: str) -> int:
    try:
        return max(0, int(Decimal(text) * 1_000_000))
    except InvalidOperation:
        raise ValueError(f"queue_duration {text!r} is not a number") from None


def _json_event(line: str, stamp: int | None) -> tuple[str, Any, Any, int | None, Any]:
    start = line.find("{")
    data = json.loads(line[start:])
    if not isinstance(data, dict):
        raise ValueError("not a JSON object")
    event = data.get("event")
    kinds = {"request.received": "receive", "request.received.openai": "openai", "request.finished": "finish"}
    if event not in kinds:
        raise ValueError(f"unknown event {event!r}")
    ts = data.get("timestamp")
    if isinstance(ts, str):
        try:
            dt = datetime.fromisoformat(ts)
        except ValueError:
            raise ValueError(f"timestamp {ts[:40]!r} is not ISO-8601") from None
        # naive local time, as datetime.now() wrote it: only differences matter
        stamp = calendar.timegm(dt.utctimetuple()) * NS_PER_S + dt.microsecond * 1000
    return kinds[event], data.get("obj"), data.get("rid"), stamp, data.get("out")


# GenerateReqInput's fields in its repr's order (managers/io_struct.py:177-204): rid comes first
_RECEIVE_FIELDS = frozenset({"rid", "image_data", "video_data", "audio_data"})
_FINISH_FIELDS = frozenset({"rid"})


def _text_event(line: str, kind: str) -> tuple[str, Any, Any]:
    marker = {"receive": "Receive: obj=", "finish": "Finish: obj=", "openai": "Receive OpenAI: obj="}[kind]
    pos = line.index(marker) + len(marker)
    if kind == "openai":
        value, _ = pyrepr.read(line, pos)
        return kind, value, None
    value, _ = pyrepr.read(line, pos, _FINISH_FIELDS if kind == "finish" else _RECEIVE_FIELDS)
    if not isinstance(value, pyrepr.Call):
        raise ValueError("obj is not a GenerateReqInput(...)")
    return kind, value.fields, value.fields.get("rid")


def _rids(rid: Any) -> list[str]:
    if isinstance(rid, list):
        return [str(r) for r in rid]
    return [] if rid is None else [str(rid)]


def _is_warmup_body(obj: Any) -> bool:
    """SGLang's start-up request (``entrypoints/http_server.py:2429-2451``): one image, 'Describe the image.'."""
    if not isinstance(obj, dict):
        return False
    if obj.get("max_tokens") != 8:
        return False
    messages = obj.get("messages")
    return isinstance(messages, list) and _WARMUP_TEXT in str(messages)[:20000]


def _requests(obj: dict[str, Any], rid: Any, stamp: int, where: str) -> list[Request]:
    rids = _rids(rid if rid is not None else obj.get("rid"))
    images, videos, audios = obj.get("image_data"), obj.get("video_data"), obj.get("audio_data")
    if len(rids) > 1:  # a batch: one list of items per request
        out = []
        for i, r in enumerate(rids):
            items = _items("image", _nth(images, i)) + _items("video", _nth(videos, i))
            items += _items("audio", _nth(audios, i))
            out.append(Request(r, stamp, where, items, prompt=_prompt(_nth(obj.get("text"), i))))
        return out
    items = _items("image", images) + _items("video", videos) + _items("audio", audios)
    return [Request(rids[0] if rids else "", stamp, where, items, prompt=_prompt(obj.get("text")))]


def _prompt(text: Any) -> Prompt | None:
    """The templated prompt SGLang logged, where whole (level 2 cuts a long one: its middle is gone)."""
    if not isinstance(text, str) or (len(text) == 2 * CUT_HALF + 3 and text[CUT_HALF : CUT_HALF + 3] == "..."):
        return None
    return Prompt(text=text)


def _nth(value: Any, i: int) -> Any:
    if isinstance(value, list) and i < len(value):
        return value[i]
    return None


_ITEM_FIELDS = (
    "max_dynamic_patch",
    "min_dynamic_patch",
    "max_long_side_pixel",
    "fps",
    "max_frames",
    "preprocess_kwargs",
)


def _items(kind: str, value: Any) -> list[ItemRef]:
    out: list[ItemRef] = []

    def walk(v: Any, depth: int) -> None:
        if v is None or depth > 8:
            return
        if isinstance(v, list):
            for x in v:
                walk(x, depth + 1)
            return
        fields: dict[str, Any] = {}
        if isinstance(v, pyrepr.Call):
            fields = v.fields
            v = fields.get("url")
        elif isinstance(v, dict):
            fields = v
            v = v.get("url")
        extra = {k: fields[k] for k in _ITEM_FIELDS if fields.get(k) is not None}
        if isinstance(v, pyrepr.Cut):
            out.append(ItemRef(kind, v.start, v.end, extra))
        elif isinstance(v, str):
            if len(v) == 2 * CUT_HALF + 3 and v[CUT_HALF : CUT_HALF + 3] == "...":
                out.append(ItemRef(kind, v[:CUT_HALF], v[CUT_HALF + 3 :], extra))
            else:
                out.append(ItemRef(kind, v, None, extra))
        else:
            out.append(ItemRef(kind, repr(v)[:80], None, extra | {"__unreadable__": True}))

    walk(value, 0)
    return out
