"""A request's prompt as its traffic gives it: the chat messages (or an engine's templated text), what
the server said it served from its prefix cache, and the request's times.

The messages keep their text and the place of each media item, never the item's data (a multi-turn
log repeats every earlier image in every turn: keeping the data would hold each again).
Pure core: standard library only.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

MEDIA_PARTS = {"image_url": "image", "video_url": "video", "audio_url": "audio", "image": "image", "video": "video"}
ROLES = ("system", "user", "assistant", "tool", "developer")
_MEDIA = {part: (kind,) for part, kind in MEDIA_PARTS.items()}  # a media part as ``Message.parts`` holds it


class Message(NamedTuple):
    """One chat message: its role and its content, text runs and media parts (their kind) in order.
    A tuple: built, hashed and compared in C (a chat's every turn re-sends its earlier messages, and the
    prefix replay looks each up)."""

    role: str
    parts: tuple[str | tuple[str], ...]  # a text run, or ``(kind,)`` for a media item


def _message(fields: tuple[str, tuple[str | tuple[str], ...]]) -> Message:
    """``Message(*fields)``, without the Python-level ``__new__`` a NamedTuple's call runs."""
    return tuple.__new__(Message, fields)


@dataclass(frozen=True)
class Prompt:
    """What the prefix cache sees of one request, where the traffic carries it."""

    messages: tuple[Message, ...] | None = None  # the chat messages (OpenAI bodies, SGLang's OpenAI line)
    text: str | None = None  # a prompt the engine already templated (SGLang's ``text``), placeholders in it
    output_tokens: int | None = None  # the tokens it generated (the server's ``completion_tokens``)
    prompt_tokens: int | None = None  # the server's ``prompt_tokens``
    cached_tokens: int | None = None  # the server's ``cached_tokens``: its prompt tokens the prefix cache served


@dataclass(frozen=True)
class Timed:
    """A request's prompt (None: the traffic has none) and its times, ns from the first request."""

    prompt: Prompt | None
    arrive_ns: int
    finish_ns: int | None  # its Finish, where the log has one


def messages_of(raw: Any) -> tuple[Message, ...] | None:
    """The messages of a chat body's ``messages`` list; None where a message is not one mmpool can read."""
    if not isinstance(raw, list):
        return None
    out: list[Message] = []
    for m in raw:
        if not isinstance(m, dict):
            return None
        role = m.get("role")
        if not isinstance(role, str):
            return None
        content = m.get("content")
        if isinstance(content, str):
            out.append(_message((role, (content,))))
            continue
        parts: list[str | tuple[str]] = []
        if isinstance(content, list):
            for part in content:
                if not isinstance(part, dict):
                    return None
                kind = part.get("type")
                if kind == "text":
                    text = part.get("text")
                    if not isinstance(text, str):
                        return None
                    parts.append(text)
                elif isinstance(kind, str) and kind in _MEDIA:
                    parts.append(_MEDIA[kind])
                else:
                    return None  # a part whose tokens mmpool cannot know (tool calls, input_audio, ...)
        elif content is not None:
            return None
        out.append(_message((role, tuple(parts))))
    return tuple(out)


def usage_of(obj: Any) -> tuple[int | None, int | None, int | None]:
    """``(prompt_tokens, completion_tokens, cached_tokens)`` of an OpenAI ``usage`` object (or a response
    carrying one) or of SGLang's ``meta_info``, each None where absent."""
    if isinstance(obj, dict) and isinstance(obj.get("usage"), dict):
        obj = obj["usage"]
    if not isinstance(obj, dict):
        return None, None, None

    def whole(value: Any) -> int | None:
        return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None

    details = obj.get("prompt_tokens_details")
    # OpenAI's usage nests it; SGLang's meta_info has it at the top
    cached = whole(details.get("cached_tokens")) if isinstance(details, dict) else whole(obj.get("cached_tokens"))
    return whole(obj.get("prompt_tokens")), whole(obj.get("completion_tokens")), cached


def media_count(messages: Sequence[Message]) -> int:
    """The media items the messages place."""
    return sum(1 for m in messages for p in m.parts if isinstance(p, tuple))
