"""Read the Python reprs SGLang's text request log prints (``GenerateReqInput(...)``, dicts, lists).

Never ``eval``: a small tokenizer (C-speed regular expressions) and a recursive reader that knows
strings, numbers, ``None``/``True``/``False``, lists, tuples, dicts and ``Name(key=value, ...)``
calls (dataclass reprs such as ``ImageData(url=...)``). SGLang cuts a long single string as
``'start' ... 'end'`` (``utils/request_logger.py:248-252``): that reads as a ``Cut``.
Pure core: standard library only.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from typing import Any

MAX_DEPTH = 64

_TOKEN = re.compile(
    r"""\s*(?:
      (?P<str>[rRbBuU]{0,2}'[^'\\\n]*(?:\\.[^'\\\n]*)*'|[rRbBuU]{0,2}"[^"\\\n]*(?:\\.[^"\\\n]*)*")
    | (?P<cut>\.\.\.)
    | (?P<punct>[\[\](){},:=])
    | (?P<atom>[^\s'"\[\](){},:=]+)
    )""",
    re.VERBOSE,
)


class ReprError(ValueError):
    """Text that is not a repr this reader knows."""


@dataclass(frozen=True)
class Cut:
    """A string the log printed as its start and its end only."""

    start: str
    end: str


@dataclass(frozen=True)
class Call:
    """``Name(key=value, ...)``: a dataclass repr."""

    name: str
    fields: dict[str, Any]


class _Reader:
    def __init__(self, text: str, pos: int, want: frozenset[str] = frozenset()) -> None:
        self.text = text
        self.pos = pos
        self.want = want  # the top-level call's fields to read; the rest of it is left unread

    def next(self) -> tuple[str, str]:
        m = _TOKEN.match(self.text, self.pos)
        if m is None:
            if not self.text[self.pos :].strip():
                return "end", ""
            raise ReprError(f"unreadable text at column {self.pos + 1}")
        self.pos = m.end()
        kind = m.lastgroup or ""
        return kind, m.group(kind)

    def peek(self) -> tuple[str, str]:
        saved = self.pos
        try:
            return self.next()
        finally:
            self.pos = saved

    def value(self, depth: int = 0) -> Any:
        if depth > MAX_DEPTH:
            raise ReprError("nested too deeply")
        kind, tok = self.next()
        if kind == "str":
            value: Any = _string(tok)
            if self.peek() == ("cut", "..."):
                self.next()
                kind2, tok2 = self.next()
                if kind2 != "str":
                    raise ReprError("a cut string without its end")
                return Cut(value, _string(tok2))
            return value
        if kind == "punct" and tok in "[(":
            close = "]" if tok == "[" else ")"
            items = self._sequence(close, depth)
            if self.peek() == ("cut", "..."):  # a long list: its first and last halves
                self.next()
                kind2, tok2 = self.next()
                if (kind2, tok2) != ("punct", "["):
                    raise ReprError("a cut list without its end")
                items = items + self._sequence("]", depth)
            return items
        if kind == "punct" and tok == "{":
            return self._dict(depth)
        if kind == "atom":
            if self.peek() == ("punct", "("):
                self.next()
                return Call(tok, self._call(depth))
            return _atom(tok)
        raise ReprError(f"unexpected {tok!r} at column {self.pos}" if tok else "the text ends inside a value")

    def _sequence(self, close: str, depth: int) -> list[Any]:
        items: list[Any] = []
        while True:
            if self.peek() == ("punct", close):
                self.next()
                return items
            items.append(self.value(depth + 1))
            kind, tok = self.next()
            if (kind, tok) == ("punct", close):
                return items
            if (kind, tok) != ("punct", ","):
                raise ReprError(f"expected ',' or {close!r}, found {tok!r}")

    def _dict(self, depth: int) -> dict[Any, Any]:
        out: dict[Any, Any] = {}
        while True:
            if self.peek() == ("punct", "}"):
                self.next()
                return out
            key = self.value(depth + 1)
            if self.next() != ("punct", ":"):
                raise ReprError("expected ':' in a dict")
            val = self.value(depth + 1)
            out[key if isinstance(key, str | int | float | bool) or key is None else repr(key)] = val
            kind, tok = self.next()
            if (kind, tok) == ("punct", "}"):
                return out
            if (kind, tok) != ("punct", ","):
                raise ReprError(f"expected ',' or '}}', found {tok!r}")

    def _call(self, depth: int) -> dict[str, Any]:
        out: dict[str, Any] = {}
        want = self.want if depth == 0 else frozenset()
        while True:
            if want and want <= out.keys():
                return out
            if self.peek() == ("punct", ")"):
                self.next()
                return out
            kind, name = self.next()
            if kind != "atom" or self.next() != ("punct", "="):
                raise ReprError("expected name=value in a call")
            out[name] = self.value(depth + 1)
            kind, tok = self.next()
            if (kind, tok) == ("punct", ")"):
                return out
            if (kind, tok) != ("punct", ","):
                raise ReprError(f"expected ',' or ')', found {tok!r}")


def _string(tok: str) -> Any:
    if tok[0] in "'\"" and "\\" not in tok:  # the common case (base64, URLs): no escapes to undo
        return tok[1:-1]
    try:
        return ast.literal_eval(tok)
    except (ValueError, SyntaxError):
        raise ReprError("a malformed string literal") from None


def _atom(tok: str) -> Any:
    if tok == "None":
        return None
    if tok in ("True", "False"):
        return tok == "True"
    try:
        return int(tok)
    except ValueError:
        pass
    try:
        return float(tok)
    except ValueError:
        return tok  # an enum or an object we do not need, kept as its text


def read(text: str, pos: int = 0, want: frozenset[str] = frozenset()) -> tuple[Any, int]:
    """The value whose repr starts at ``text[pos]``, and where it ends.

    With ``want``, a top-level ``Name(...)`` is read only until it has given those fields (a
    dataclass repr lists its fields in a fixed order): the value is then a ``Call`` of them alone.

    Raises:
        ReprError: text this reader does not know.
    """
    reader = _Reader(text, pos, want)
    try:
        value = reader.value()
    except RecursionError:
        raise ReprError("nested too deeply") from None
    return value, reader.pos
