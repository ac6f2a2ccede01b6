"""OpenAI chat-completions request bodies, one JSON object per line, as gateways log them.

Each line is a body (``{"model": ..., "messages": [...]}``, or one wrapped as ``{"body": {...}}``
or ``{"request": {...}}``) with an optional ``timestamp``: epoch seconds or ISO-8601, and optionally
the server's answer beside it (``"response"``, or its ``"usage"``: the prompt's, output's and cached
tokens, which ``mmpool cache`` compares its prefix replay with). Items are
the content parts ``image_url``, ``video_url`` and ``audio_url``; their per-item fields are kept
for the family to honour or ignore. Pure core: standard library only.
"""

from __future__ import annotations

import calendar
import json
import json.scanner
from collections.abc import Iterator
from datetime import UTC, datetime
from decimal import Decimal, InvalidOperation
from typing import Any

from mmpool_cli.core.words import count
from mmpool_cli.inputs.traffic.lines import open_lines
from mmpool_cli.inputs.traffic.model import NS_PER_S, ItemRef, Request, Summary
from mmpool_cli.inputs.traffic.prompts import Message, Prompt, messages_of, usage_of

ITEM_FIELDS = (
    "max_dynamic_patch",
    "min_dynamic_patch",
    "max_long_side_pixel",
    "fps",
    "max_frames",
    "max_tokens_per_frame",
    "max_image_tokens",
)
MAX_ID_CHARS = 200
_PARTS = {"image_url": "image", "video_url": "video", "audio_url": "audio"}
_MEDIA_PART = {part: (kind,) for part, kind in _PARTS.items()}  # as ``Message.parts`` holds a media part
_new = tuple.__new__  # a Message built without the Python-level ``__new__`` a NamedTuple's call runs


# what json.loads scans a body with (typeshed types its argument as the scanner itself, not its decoder)
_scan = json.scanner.make_scanner(json.JSONDecoder())  # type: ignore[arg-type]


class LineError(ValueError):
    """A line that is not a chat-completions body."""


def looks_like(first: bytes) -> bool:
    """Whether the start of a file reads as JSON-lines request bodies (for ``--from auto``)."""
    return first.lstrip().startswith(b"{") and b'"messages"' in first


def read(path: str, summary: Summary) -> Iterator[Request | tuple[str, str]]:
    """The requests of the body log at ``path``; a bad line is ``(where, message)``."""
    last_t = 0
    untimed = 0
    for lineno, raw in open_lines(path):
        where = f"{path}:{lineno}"
        if raw is None:
            yield where, "a line longer than 256 MiB"
            continue
        if raw[:1] != b"{" and not raw.strip():  # (a body's line opens with "{": no copy stripped to see)
            summary.skipped["blank"] += 1
            continue
        try:
            request, t = parse(raw, lineno)
        except LineError as e:
            yield where, str(e)
            continue
        if t is None:
            untimed += 1
            t = last_t
        last_t = t
        request.t_ns = t
        request.where = where
        yield request
    if untimed:
        summary.notes.append(
            f"{count(untimed, 'body', 'bodies')} without a timestamp {'was' if untimed == 1 else 'were'} given the "
            "previous line's time (0 for the first): they arrive together, a burst; log a timestamp per body for "
            "real arrivals"
        )


def parse(raw: bytes, lineno: int) -> tuple[Request, int | None]:
    """One body line -> its request (id: the body's ``id``, else ``user``, else ``line<N>``) and time."""
    try:
        obj = _json(raw)
    except (ValueError, UnicodeDecodeError) as e:
        raise LineError(f"not a JSON object ({str(e).splitlines()[0]})") from None
    if not isinstance(obj, dict):
        raise LineError(f"a body is a JSON object, not {type(obj).__name__}")
    body = obj
    for wrapper in ("body", "request"):
        if isinstance(obj.get(wrapper), dict) and "messages" in obj[wrapper]:
            body = obj[wrapper]
    messages = body.get("messages")
    if not isinstance(messages, list):
        raise LineError('no "messages" list: not a chat-completions body')
    t = _timestamp(obj.get("timestamp", body.get("timestamp")))
    rid = f"line{lineno}"
    for key in ("id", "user"):
        value = obj.get(key, body.get(key))
        if isinstance(value, str) and 0 < len(value) <= MAX_ID_CHARS:
            rid = value
            break
    walked = _walk(messages)  # (None: a shape beyond the common one, each read apart as they always were)
    items, chat = walked if walked is not None else (_items(messages), messages_of(messages))
    # the server's answer, where the log keeps it beside the body: its token counts
    answer = obj.get("response")
    if not isinstance(answer, dict):
        answer = obj.get("usage")
    prompt_tokens, output_tokens, cached = usage_of(answer) if isinstance(answer, dict) else (None, None, None)
    prompt = Prompt(chat, None, output_tokens, prompt_tokens, cached)
    return Request(rid, 0, "", items, prompt=prompt), t


def _json(raw: bytes) -> Any:
    """``json.loads(raw)``, the same value and the same errors. A line that opens with "{" is one json.loads
    decodes as UTF-8: decoded here and scanned at once, it skips the detection of its encoding and the
    search for whitespace around it; a value with anything after it is left to json.loads to judge."""
    if raw[:1] != b"{" or raw[1:2] == b"\0":
        return json.loads(raw)
    text = raw.decode("utf-8", "surrogatepass")
    try:
        obj, end = _scan(text, 0)
    except StopIteration:
        end = -1
    return obj if end == len(text) else json.loads(text)


def _items(messages: list[Any]) -> list[ItemRef]:
    """The media items of a body's messages, in order.

    Raises:
        LineError: a media part without a url string.
    """
    items: list[ItemRef] = []
    for message in messages:
        content = message.get("content") if isinstance(message, dict) else None
        if not isinstance(content, list):
            continue
        for part in content:
            if not isinstance(part, dict) or not isinstance(part.get("type"), str) or part["type"] not in _PARTS:
                continue
            kind = _PARTS[part["type"]]
            spec = part.get(part["type"])
            if isinstance(spec, str):
                spec = {"url": spec}
            if not isinstance(spec, dict) or not isinstance(spec.get("url"), str):
                raise LineError(f"a {part['type']} part without a url string")
            fields = {k: spec[k] for k in ITEM_FIELDS if spec.get(k) is not None}
            items.append(ItemRef(kind, spec["url"], None, fields))
    return items


def _walk(messages: list[Any]) -> tuple[list[ItemRef], tuple[Message, ...]] | None:
    """``(_items(messages), messages_of(messages))`` in one pass, for the shape nearly every body has: roles
    and texts strings, media parts ``{"type": "image_url", "image_url": {"url": ...}}``. None for any other
    shape (a message without content, a part mmpool skips, a bare-string url, ...): ``_items`` and
    ``messages_of`` read those. Exact types only: JSON gives no subclass, and anything else is not common;
    a key missing or a value not an object is a KeyError or TypeError of the indexing."""
    items: list[ItemRef] = []
    out: list[Message] = []
    try:
        for m in messages:
            role = m["role"]
            content = m["content"]
            if type(role) is not str:
                return None
            if type(content) is str:
                out.append(_new(Message, (role, (content,))))
                continue
            if type(content) is not list:
                return None
            parts: list[str | tuple[str]] = []
            for part in content:
                kind = part["type"]
                if kind == "text":
                    text = part["text"]
                    if type(text) is not str:
                        return None
                    parts.append(text)
                    continue
                media = _MEDIA_PART[kind]
                spec = part[kind]
                url = spec["url"]
                if type(url) is not str or type(spec) is not dict:
                    return None
                fields = {k: spec[k] for k in ITEM_FIELDS if spec.get(k) is not None} if len(spec) > 1 else {}
                items.append(ItemRef(media[0], url, None, fields))
                parts.append(media)
            out.append(_new(Message, (role, tuple(parts))))
    except (KeyError, TypeError):
        return None
    return items, tuple(out)


MAX_EPOCH_SECONDS = 10**11  # the year 5138: a larger epoch is milliseconds or microseconds


def _epoch(seconds: Decimal, value: Any) -> int:
    if seconds > MAX_EPOCH_SECONDS:
        raise LineError(f"timestamp {str(value)[:40]} is after the year 5000: epoch milliseconds? give seconds")
    return int(seconds * NS_PER_S)


def _timestamp(value: Any) -> int | None:
    if value is None:
        return None
    if type(value) is float and 0 <= value < MAX_EPOCH_SECONDS:
        # the common case, without a Decimal: the shortest repr's digits, the fraction cut at 9 (as ``_epoch``'s
        # int() truncates); a float in range has at most 17 significant digits, so Decimal's product is exact too
        text = repr(value)
        if "e" not in text:
            whole, _, fraction = text.partition(".")
            return int(whole) * NS_PER_S + int(fraction[:9].ljust(9, "0"))
    elif type(value) is int and 0 <= value <= MAX_EPOCH_SECONDS:
        return value * NS_PER_S
    if isinstance(value, bool):
        raise LineError("timestamp must be epoch seconds or ISO-8601, not a boolean")
    if isinstance(value, int | float):
        try:
            seconds = Decimal(str(value))
        except InvalidOperation:
            raise LineError(f"timestamp {value!r} is not a number") from None
        if not seconds.is_finite() or seconds < 0:
            raise LineError(f"timestamp {value!r} is not a time")
        return _epoch(seconds, value)
    if isinstance(value, str):
        text = value.strip()
        try:
            number = Decimal(text)
        except InvalidOperation:
            number = None
        if number is not None:
            if not number.is_finite() or number < 0:
                raise LineError(f"timestamp {text[:40]!r} is not a time")
            return _epoch(number, text)
        try:
            dt = datetime.fromisoformat(text.replace("Z", "+00:00"))
        except ValueError:
            raise LineError(f"timestamp {text[:40]!r} is neither epoch seconds nor ISO-8601") from None
        if dt.tzinfo is not None:
            dt = dt.astimezone(UTC)
        return calendar.timegm(dt.utctimetuple()) * NS_PER_S + dt.microsecond * 1000
    raise LineError(f"timestamp must be epoch seconds or ISO-8601, not {type(value).__name__}")
