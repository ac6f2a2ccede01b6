"""vLLM's GiB flags (``--mm-processor-cache-gb``, ``--mm-ipc-gpu-memory-gb``), read as vLLM reads them.

vLLM's parser reads them with ``float`` and its config refuses values below 0 (``Field(ge=0)``);
the bytes are then ``int(gb * GiB_bytes)``. Multiplying a float by 2^30 is exact (a power of two
only moves the exponent), so those bytes are the float's exact value times 2^30, truncated, and
mmpool computes them with ``Fraction`` from the float Python's own ``float`` gives vLLM. Where that
float differs from the decimal the user wrote (``0.99999999999999999999`` is 1.0 to a float),
the value says so. Pure core: standard library only.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from fractions import Fraction

from mmpool_cli.errors import MmpoolError

GiB = 1 << 30
MAX_TEXT = 64  # longer values are refused before anything reads them
# what mmpool calls a plain spelling: ASCII digits, one point, an optional exponent
_PLAIN = re.compile(r"[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?")


class GibError(MmpoolError):
    """A GiB value vLLM refuses (``invalid float value``, below 0) or cannot turn into bytes.

    ``by_parser``: the parser itself refuses it; otherwise vLLM parses it and fails at start-up.
    """

    def __init__(self, message: str, *, by_parser: bool = False) -> None:
        super().__init__(message)
        self.by_parser = by_parser


@dataclass(frozen=True)
class GibValue:
    """One GiB flag value: the text, the float vLLM holds, and the bytes vLLM computes from it."""

    flag: str
    text: str
    value: float
    written: Fraction | None  # the decimal as written, exactly; None for a spelling only float() reads
    bytes: int  # int(value * 2**30), the figure vLLM uses

    @property
    def rounded(self) -> bool:
        """Whether the bytes vLLM computes from its float differ from those of the decimal the user wrote."""
        return self.written is not None and math.trunc(self.written * GiB) != self.bytes

    @property
    def odd_spelling(self) -> bool:
        """Whether ``float`` accepts the text in a form beyond plain digits (``4_0``, spaces, other scripts)."""
        return self.written is None


def parse(flag: str, text: str) -> GibValue:
    """``text`` as vLLM's parser and config read ``flag``.

    >>> parse("--mm-ipc-gpu-memory-gb", "1e-7").bytes
    107
    >>> parse("--mm-processor-cache-gb", "0.99999999999999999999").bytes
    1073741824

    Raises:
        GibError: vLLM refuses it: not a float (the argparse message), below 0 or NaN (its config's
            ``ge=0``), or infinite or too large to turn into bytes (``int()`` of an infinity).
    """
    if len(text) > MAX_TEXT:
        raise GibError(
            f"{flag}: a value of {len(text)} characters; give a number of GiB such as 4 or 0.5", by_parser=True
        )
    try:
        value = float(text)
    except ValueError:
        raise GibError(
            f"argument {flag}: invalid float value: {text!r} (vLLM's parser refuses it); give a number of GiB "
            "such as 4 or 0.5, without a unit",
            by_parser=True,
        ) from None
    if math.isnan(value) or value < 0:
        raise GibError(
            f"{flag} {text}: vLLM refuses it at start-up (Input should be greater than or equal to 0); "
            "give 0 to disable it or a positive number of GiB"
        )
    if math.isinf(value) or math.isinf(value * GiB):
        raise GibError(
            f"{flag} {text}: vLLM cannot turn this into bytes (int(gb * 2**30) of an infinity fails); "
            "give a finite number of GiB"
        )
    stripped = text.strip(" \t")
    written = Fraction(stripped) if _PLAIN.fullmatch(stripped) else None
    return GibValue(flag, text, value, written, bytes_of(value))


def bytes_of(value: float) -> int:
    """``int(value * 2**30)`` computed exactly (the product of a float and 2^30 is exact).

    >>> bytes_of(0.1)
    107374182
    """
    return math.trunc(Fraction(value) * GiB)
