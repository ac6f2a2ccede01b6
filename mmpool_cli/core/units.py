"""Exact size parsing and formatting: human text to an integer number of bytes, and back.

Pure core: standard library only. No float is used anywhere: ``4.35MB`` is 4 350 000 bytes.

Unit policy (also in docs/sizes.md):

* a bare integer, or ``B``, is bytes;
* ``kB``/``KB``, ``MB``, ``GB``, ``TB``, ``PB`` are powers of 1000;
* ``KiB``, ``MiB``, ``GiB``, ``TiB``, ``PiB`` and the Kubernetes forms ``Ki``, ``Mi``, ``Gi``,
  ``Ti``, ``Pi`` are powers of 1024;
* the prefix letter and the ``i`` may be written in either case, the byte symbol must be an
  upper-case ``B``: a lower-case ``b`` means bits (``1Gb``) and is refused;
* the bare letters ``K``, ``M``, ``G``, ``T``, ``P`` are refused as ambiguous (they mean 1000^n
  to Kubernetes and SGLang but 1024^n to Docker, systemd and vLLM); the error shows both readings;
* one or more spaces may stand between the number and the unit, and ASCII spaces and tabs may
  surround the size; no other whitespace or control character is accepted;
* a size is at most 2^63 - 1 bytes (8 EiB less one byte: torch's and CUDA's 64-bit limit);
* a fraction is allowed when the result is a whole number of bytes (``1.5KiB`` = 1 536).
"""

from __future__ import annotations

import re
import unicodedata

from mmpool_cli.core.excerpt import excerpt
from mmpool_cli.errors import SizeError

_PREFIXES = "kmgtp"
DECIMAL_UNITS = {"kB": 1000, "MB": 1000**2, "GB": 1000**3, "TB": 1000**4, "PB": 1000**5}
BINARY_UNITS = {"KiB": 1024, "MiB": 1024**2, "GiB": 1024**3, "TiB": 1024**4, "PiB": 1024**5}

KiB = BINARY_UNITS["KiB"]
MiB = BINARY_UNITS["MiB"]
NS_PER_S = 10**9  # nanoseconds in a second: the simulator's clock


def align_up(value: int, alignment: int) -> int:
    """``value`` rounded up to a multiple of ``alignment`` (both non-negative integers).

    >>> align_up(50633856, 256), align_up(0, 256)
    (50633984, 0)
    """
    return -(-value // alignment) * alignment


MAX_SIZE_TEXT = 64
MAX_BYTES = 2**63 - 1
_BLANKS = " \t"
ACCEPTED_FORMS = (
    "write a whole number of bytes or a number with a unit, e.g. 512MiB, 1GiB, 1.5GB "
    "(kB/MB/GB/TB/PB = powers of 1000; KiB/MiB/GiB/TiB/PiB or Ki/Mi/Gi/Ti/Pi = powers of 1024)"
)

# The grammar as one regular expression, for the JSON Schema: sizes that parse_size reads, except
# that it cannot say "a whole number of bytes" or "at most 2^63 - 1 bytes".
SIZE_PATTERN = (
    r"^(?!.*\n)[ \t]*(?=[0-9][^\n]{0,63}?[ \t]*$)"
    r"[0-9]+(\.[0-9]+)? *([KkMmGgTtPp][iI]B?|[KkMmGgTtPp]B|B)?[ \t]*$"
)
_SIZE_RE = re.compile(r"(?P<int>[0-9]+)(?:\.(?P<frac>[0-9]+))?(?P<space> *)(?P<unit>[A-Za-z]*)")
_BINARY_UNIT_RE = re.compile(r"([KkMmGgTtPp])[iI](B?)")
_DECIMAL_UNIT_RE = re.compile(r"([KkMmGgTtPp])B")
_BITS_RE = re.compile(r"([KkMmGgTtPp][iI]?)?(b|bit|bits|bps)", re.IGNORECASE)
_SCIENTIFIC_RE = re.compile(r"[+-]?[0-9.]+[eE][+-]?[0-9]+.*")
_NOT_FINITE = {"inf", "+inf", "-inf", "infinity", "+infinity", "-infinity", "nan", "+nan", "-nan"}
_NOT_FINITE |= {".inf", "+.inf", "-.inf", ".nan"}  # YAML's spellings


def parse_size(text: str) -> int:
    """Parse a human size into an exact, non-negative number of bytes.

    Raises:
        SizeError: the text is not a size under the unit policy of this module; the message
            says what was wrong and what to write instead.

    >>> parse_size("4.35MB")
    4350000
    >>> parse_size("1.5KiB")
    1536
    >>> parse_size("2Gi")
    2147483648
    """
    if not isinstance(text, str):
        raise SizeError(f"invalid size {text!r}: expected text; {ACCEPTED_FORMS}")
    stripped = text.strip(_BLANKS)
    if not stripped:
        raise _error(text, "the size is empty")
    if len(stripped) > MAX_SIZE_TEXT:
        raise _error(text, f"the text is longer than {MAX_SIZE_TEXT} characters")
    # str.strip() would also drop Unicode and control whitespace; those are refused, named.
    if odd := next((ch for ch in stripped if ch.isspace() and ch != " " or not ch.isprintable()), None):
        if 0xDC80 <= ord(odd) <= 0xDCFF:  # a byte of the command line that is not UTF-8 (surrogateescape)
            raise _error(text, f"the byte 0x{ord(odd) - 0xDC00:02x}, which is not UTF-8, is not accepted in a size")
        raise _error(text, f"the character U+{ord(odd):04X} ({_char_name(odd)}) is not accepted in a size")
    match = _SIZE_RE.fullmatch(stripped)
    if match is None:
        raise _diagnose(text, stripped)
    multiplier = _unit_multiplier(text, match)
    int_part, frac = match["int"], match["frac"] or ""
    scaled = int(int_part + frac) * multiplier
    denominator = 10 ** len(frac)
    whole: int
    rest: int
    whole, rest = divmod(scaled, denominator)
    if rest:
        exact = f"{whole}.{rest:0{len(frac)}d}".rstrip("0")
        raise _error(text, f"that is {exact} bytes, not a whole number of bytes")
    if whole > MAX_BYTES:
        raise _error(text, "that is larger than 2^63 - 1 bytes (8 EiB), the most torch and CUDA can address")
    return whole


_INT_RE = re.compile(r"[+-]?[0-9]+")


def parse_int(text: str | int) -> int:
    """An integer option's text by the rule sizes follow: ASCII digits, an optional sign, ASCII spaces around.

    ``int()`` alone would read ``'٤'`` as 4 and ``'1_000'`` as 1000; one rule for every integer.

    >>> parse_int(" 8")
    8
    >>> parse_int("٤")
    Traceback (most recent call last):
    ...
    ValueError: '٤': only the ASCII digits 0-9 are accepted
    """
    if isinstance(text, int):  # a default, already an integer
        return text
    stripped = text.strip(" \t")
    if _INT_RE.fullmatch(stripped):
        return int(stripped)
    if any(ch.isdigit() or unicodedata.category(ch) == "Nd" for ch in stripped if ch not in "0123456789"):
        raise ValueError(f"{excerpt(text)}: only the ASCII digits 0-9 are accepted")
    if "_" in stripped:
        raise ValueError(f"{excerpt(text)}: underscores are not accepted in numbers")
    raise ValueError(f"{excerpt(text)} is not an integer")


def _char_name(ch: str) -> str:
    return unicodedata.name(ch, "a control character")


def _unit_multiplier(text: str, match: re.Match[str]) -> int:
    unit = match["unit"]
    number = match["int"] + (f".{match['frac']}" if match["frac"] else "")
    if unit in ("", "B"):
        return 1
    if m := _BINARY_UNIT_RE.fullmatch(unit):
        return BINARY_UNITS[f"{m[1].upper()}iB"]
    if m := _DECIMAL_UNIT_RE.fullmatch(unit):
        return DECIMAL_UNITS["kB" if m[1] in "kK" else f"{m[1].upper()}B"]
    if len(unit) == 1 and unit.lower() in _PREFIXES:
        p = unit.upper()
        raise _error(
            text,
            f"the unit {unit!r} is ambiguous: tools read it as 1000^n or 1024^n",
            f"{number}{p if p != 'K' else 'k'}B or {number}{p}iB",
        )
    if m := _BITS_RE.fullmatch(unit):
        prefix = m[1] or ""
        hint = f"{number}{prefix[:1].upper()}{prefix[1:].lower()}B" if prefix else f"{number}B"
        raise _error(text, f"{unit!r} means bits (lower-case b); sizes are bytes (upper-case B)", hint)
    raise _error(text, f"{unit!r} is not a unit mmpool knows")


def _diagnose(text: str, stripped: str) -> SizeError:
    if stripped.lower() in _NOT_FINITE:
        return _error(text, "a size must be a finite number")
    if stripped.startswith("-"):
        return _error(text, "a size cannot be negative")
    if stripped.startswith("+"):
        return _error(text, "a size takes no sign", stripped[1:].strip() or None)
    if any(ch.isdigit() or unicodedata.category(ch) == "Nd" for ch in stripped if ch not in "0123456789"):
        return _error(text, "only the ASCII digits 0-9 are accepted")
    if "," in stripped:
        return _error(text, "commas are not accepted (no thousands separators or decimal commas)")
    if "_" in stripped:
        return _error(text, "underscores are not accepted in numbers", stripped.replace("_", ""))
    if _SCIENTIFIC_RE.fullmatch(stripped):
        return _error(text, "scientific notation is not accepted")
    if m := re.fullmatch(r"0([xXoObB])([0-9A-Fa-f]+)", stripped):
        base = {"x": 16, "o": 8, "b": 2}[m[1].lower()]
        kind = {16: "hexadecimal", 8: "octal", 2: "binary"}[base]
        try:
            decimal: str | None = f"{int(m[2], base)}"
        except ValueError:  # digits the base has not
            decimal = None
        return _error(text, f"{kind} is not accepted: sizes are decimal", decimal)
    if stripped.startswith("."):
        return _error(text, "a number needs a digit before the point", "0" + stripped)
    if re.fullmatch(r"[0-9]+\. *[A-Za-z]*", stripped):
        return _error(text, "a number needs a digit after the point", stripped.replace(".", "", 1))
    if re.fullmatch(r"[A-Za-z]+ *[0-9.]+", stripped):
        return _error(text, "the number comes before the unit")
    if m := re.match(r"[0-9]+(?:\.[0-9]+)? *[A-Za-z]*", stripped):
        return _error(text, f"unexpected text {stripped[m.end() :]!r} after {m.group(0)!r}")
    return _error(text, "it is not a number followed by an optional unit")


def _error(text: str, reason: str, suggestion: str | None = None) -> SizeError:
    hint = f"; did you mean {suggestion}?" if suggestion else f"; {ACCEPTED_FORMS}"
    return SizeError(f"invalid size {excerpt(text)}: {reason}{hint}")


def format_bytes(n: int) -> str:
    """Exact bytes with thousands separators: ``1,073,741,824 B``."""
    return f"{n:,} B"


def format_exact(n: int) -> str:
    """The shortest exact spelling ``parse_size`` reads back to ``n``.

    >>> format_exact(268435456), format_exact(10**9), format_exact(1000001)
    ('256MiB', '1GB', '1000001B')
    """
    if n:
        for units in (BINARY_UNITS, DECIMAL_UNITS):
            for name, size in reversed(units.items()):
                if n % size == 0:
                    return f"{n // size}{name}"
    return f"{n}B"


def format_binary(n: int, decimals: int = 2) -> str:
    """A binary-unit reading of ``n`` bytes, rounded half up to ``decimals`` places: ``255.86 MiB``.

    Integer arithmetic only; below 1 KiB the exact byte count is returned.
    """
    return _binary_reading(n, decimals)[0]


def is_whole_binary(n: int, decimals: int = 2) -> bool:
    """Whether ``format_binary(n)`` is exact rather than rounded."""
    return _binary_reading(n, decimals)[1]


def _binary_reading(n: int, decimals: int) -> tuple[str, bool]:
    if abs(n) < KiB:
        return f"{n} B", True
    sign, n = ("-", -n) if n < 0 else ("", n)
    names = list(BINARY_UNITS)
    index = min(len(names) - 1, (n.bit_length() - 1) // 10 - 1)
    scale = 10**decimals
    while True:
        size = 1024 ** (index + 1)
        value = (n * scale + size // 2) // size
        if value < 1024 * scale or index == len(names) - 1:
            break
        index += 1
    whole, part = divmod(value, scale)
    text = f"{whole}" if part == 0 else f"{whole}.{part:0{decimals}d}".rstrip("0")
    return f"{sign}{text} {names[index]}", n * scale % size == 0


def format_size(n: int) -> str:
    """Exact bytes plus the binary reading, marked ``≈`` when rounded.

    >>> format_size(268288000)
    '268,288,000 B (≈255.86 MiB)'
    >>> format_size(2**30)
    '1,073,741,824 B (1 GiB)'
    """
    if abs(n) < KiB:
        return format_bytes(n)
    mark = "" if is_whole_binary(n) else "≈"
    return f"{format_bytes(n)} ({mark}{format_binary(n)})"
