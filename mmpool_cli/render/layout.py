"""Laying out human output at any width without cutting or splitting a number.

Text breaks only at whitespace, and never between a number and its unit (``50,633,856 B``,
``(≈48.29 MiB)``, ``0.05 s``) or a comparison and its number (``≥ 7.02 MiB``): those are atoms.
A word wider than the line is kept whole on a line of its own (the terminal may wrap it; mmpool
never cuts it). Tables whose columns cannot hold their widest atom side by side are stacked: one
``key value`` block per row. Pure: no rich; ``render.human`` turns the lines into a renderable.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field

Span = tuple[str, str | None]  # text and its style (a rich style name, or None)
Line = list[Span]

# A number ending a word, and a unit word after it: the two stay on one line.
_NUMBER_END = re.compile(r"\(?[≈~≤<>]?[+-]?[0-9][0-9,._]*$")
_UNIT = re.compile(r"(?:B|KiB|MiB|GiB|TiB|PiB|EiB|kB|KB|MB|GB|TB|PB|bytes?|s|ms|µs|%|ns)[)\]}.,;:]*")
_WORD = re.compile(r"(\s*)(\S+)")
# A comparison written apart from its number ("≥ 48.29 MiB", "> 0%"): the sign and the number are one.
_COMPARATORS = frozenset(("≥", "≤", ">", "<", "≈", "~"))
_NUMBER_START = re.compile(r"\(?[+-]?[0-9]")


@dataclass
class _Atom:
    """What a line may not break: its text pieces (with styles) and the whitespace before it."""

    sep: str
    pieces: list[Span]

    @property
    def width(self) -> int:
        return sum(len(text) for text, _ in self.pieces)

    @property
    def text(self) -> str:
        return "".join(text for text, _ in self.pieces)


def atoms(spans: Sequence[Span]) -> list[_Atom]:
    """The unbreakable pieces of styled text, each with the whitespace before it."""
    found: list[_Atom] = []
    trailing = ""  # whitespace that ended the previous span comes before the next word
    for text, style in spans:
        for sep, word in _WORD.findall(text):
            sep, trailing = trailing + sep, ""
            glued = not sep and found  # no space between two spans: one atom
            previous = found[-1].text if found else ""
            unit = sep == " " and _UNIT.fullmatch(word) and _NUMBER_END.search(previous)
            # a ratio, "3 / 4", is one number too
            ratio = sep == " " and (word == "/" and _NUMBER_END.search(previous) or previous.endswith(" /"))
            compared = sep == " " and previous in _COMPARATORS and _NUMBER_START.match(word)
            if glued or unit or ratio or compared:
                found[-1].pieces.append((sep + word, style))
            else:
                found.append(_Atom(sep, [(word, style)]))
        trailing += text[len(text.rstrip()) :] if text.strip() else text
    return found


def widest_atom(spans: Sequence[Span]) -> int:
    """The width of the widest piece the text cannot break: the narrowest column that holds it."""
    return max((a.width for a in atoms(spans)), default=0)


def natural(spans: Sequence[Span]) -> int:
    """The width of the text on one line."""
    return len("".join(text for text, _ in spans).strip())


def wrap(spans: Sequence[Span], width: int) -> list[Line]:
    """Greedy lines of at most ``width`` (an atom wider than that gets a line of its own)."""
    lines: list[Line] = []
    line: Line = []
    used = 0
    for atom in atoms(spans):
        if line and used + len(atom.sep) + atom.width > width:
            lines.append(line)
            line, used = [], 0
        if line:
            line.append((atom.sep, None))
            used += len(atom.sep)
        line += atom.pieces
        used += atom.width
    if line or not lines:
        lines.append(line)
    return lines


def _pad(line: Line, width: int, right: bool) -> Line:
    room = width - sum(len(t) for t, _ in line)
    if room <= 0:
        return line
    return [(" " * room, None), *line] if right else [*line, (" " * room, None)]


def _strip(line: Line) -> Line:
    """The line without trailing spaces (a padded last cell leaves some)."""
    out = list(line)
    while out and not out[-1][0].rstrip():
        out.pop()
    if out:
        text, style = out[-1]
        out[-1] = (text.rstrip(), style)
    return out


class Block:
    """Something laid out at a width: a list of lines of styled spans."""

    def lines(self, width: int) -> list[Line]:  # pragma: no cover - abstract
        raise NotImplementedError


@dataclass
class Paragraph(Block):
    """Styled text, wrapped at whitespace, never inside an atom."""

    spans: list[Span]
    indent: int = 0

    def lines(self, width: int) -> list[Line]:
        pad: Line = [(" " * self.indent, None)] if self.indent else []
        return [pad + line if line else [] for line in wrap(self.spans, max(width - self.indent, 1))]


@dataclass
class Rows(Block):
    """A key/value table: keys in one column, values beside them; stacked when the values have no room."""

    title: str | None
    rows: list[tuple[str, list[Span]]]
    key_style: str | None = "dim"
    gap: int = 2

    def lines(self, width: int) -> list[Line]:
        out: list[Line] = [] if not self.title else Paragraph([(self.title, "bold")]).lines(width)
        if not self.rows:
            return out
        key_width = max(len(key) for key, _ in self.rows)
        value_width = width - key_width - self.gap
        if value_width >= max(widest_atom(value) for _, value in self.rows):
            for key, value in self.rows:
                for i, line in enumerate(wrap(value, value_width)):
                    head = key.ljust(key_width) if i == 0 else " " * key_width
                    out.append(_strip([(head, self.key_style if i == 0 else None), (" " * self.gap, None), *line]))
            return out
        for key, value in self.rows:  # stacked: the key, then its value indented below it
            out.append([(key, self.key_style)])
            out += Paragraph(value, indent=2).lines(width)
        return out


@dataclass
class Grid(Block):
    """A table with a header row; its columns shrink (headers first) and, when they cannot, it stacks."""

    title: str | None
    headers: list[str]
    rows: list[list[list[Span]]]
    right: set[int] = field(default_factory=set)  # columns justified right
    gap: int = 3
    rule: bool = True  # a line under the header

    def _used(self, c: int, width: int) -> int:
        """How wide column ``c`` really is when wrapped at ``width``."""
        cells: list[list[Span]] = [[(self.headers[c], None)], *(r[c] for r in self.rows)]
        return max(sum(len(t) for t, _ in line) for cell in cells for line in wrap(cell, width))

    def _widths(self, width: int) -> list[int] | None:
        columns = range(len(self.headers))
        head = [[(h, None)] for h in self.headers]
        body = [max((natural(r[c]) for r in self.rows), default=0) for c in columns]
        full = [max(natural(head[c]), body[c]) for c in columns]
        least = [max([widest_atom(head[c]), *(widest_atom(r[c]) for r in self.rows)]) for c in columns]
        room = width - self.gap * (len(full) - 1)
        widths = list(full)
        # first let the headers wrap ...
        for c in columns:
            excess = sum(widths) - room
            if excess > 0:
                widths[c] = self._used(c, widths[c] - min(excess, widths[c] - max(body[c], least[c])))
        # ... then wrap the cells of the column with the most to give, as tight as they wrap
        while sum(widths) > room:
            c = max(columns, key=lambda i: widths[i] - least[i])
            if widths[c] <= least[c]:
                return None
            widths[c] = self._used(c, max(least[c], widths[c] - (sum(widths) - room)))
        # and give what is left back, to a column that then needs fewer lines
        for c in columns:
            spare = room - sum(widths)
            if spare > 0 and widths[c] < full[c]:
                wider = self._used(c, widths[c] + spare)
                if self._height(c, wider) < self._height(c, widths[c]):
                    widths[c] = wider
        return widths

    def _height(self, c: int, width: int) -> int:
        cells: list[list[Span]] = [[(self.headers[c], None)], *(r[c] for r in self.rows)]
        return sum(len(wrap(cell, width)) for cell in cells)

    def lines(self, width: int) -> list[Line]:
        out: list[Line] = [] if not self.title else Paragraph([(self.title, "bold")]).lines(width)
        widths = self._widths(width)
        if widths is None:
            for i, row in enumerate(self.rows):
                if i:
                    out.append([])
                out += Rows(None, list(zip(self.headers, row, strict=True))).lines(width)
            return out
        out += self._row([[(h, None)] for h in self.headers], widths)
        if self.rule:
            out.append([("─" * (sum(widths) + self.gap * (len(widths) - 1)), None)])
        for row in self.rows:
            out += self._row(row, widths)
        return out

    def _row(self, cells: list[list[Span]], widths: list[int]) -> list[Line]:
        wrapped = [wrap(cell, w) for cell, w in zip(cells, widths, strict=True)]
        height = max(len(w) for w in wrapped)
        lines: list[Line] = []
        for i in range(height):
            line: Line = []
            for c, w in enumerate(widths):
                if c:
                    line.append((" " * self.gap, None))
                part = wrapped[c][i] if i < len(wrapped[c]) else []
                line += _pad(part, w, c in self.right)
            lines.append(_strip(line))
        return lines


def plain(lines: list[Line]) -> str:
    """The lines as text, styles dropped (what a pipe or ``NO_COLOR`` shows)."""
    return "\n".join("".join(text for text, _ in line) for line in lines)
