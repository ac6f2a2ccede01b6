"""Python's float arithmetic, reproduced bit for bit with integers and Fractions.

The processors decide sizes with float expressions such as ``floor(h / sqrt(h * w / m) / f)``.
Exact rational arithmetic is not enough to match them: at the boundaries where the exact value
is an integer, the float result can fall just below it (a 3586x3586 image gives Qwen a 3556-px
side, not the 3584 exact arithmetic gives). So each helper here returns the exact value of the
IEEE-754 result of one operation (round to nearest, ties to even), as a Fraction, and mmpool
runs the reference's expressions step by step through them.
Sizes are bounded by the callers, so no result overflows or becomes subnormal.
Pure core: standard library only.
"""

from __future__ import annotations

from fractions import Fraction
from math import isqrt

Number = int | Fraction

DOUBLE = 53  # significand bits of a binary64 float (Python's float)
SINGLE = 24  # significand bits of a binary32 float (torch's default float32)


def _round_to(x: Fraction, bits: int) -> Fraction:
    """``x`` rounded to ``bits`` significant bits, ties to even."""
    if x == 0:
        return x
    sign = -1 if x < 0 else 1
    x = abs(x)
    # scale so that the integer part of x / 2**e has exactly `bits` bits
    e = x.numerator.bit_length() - x.denominator.bit_length() - bits
    while x / _pow2(e) >= 1 << bits:
        e += 1
    while x / _pow2(e) < 1 << (bits - 1):
        e -= 1
    return sign * round(x / _pow2(e)) * _pow2(e)


def _pow2(e: int) -> Fraction:
    return Fraction(1 << e) if e >= 0 else Fraction(1, 1 << -e)


def f64(x: Number) -> Fraction:
    """The value of ``float(x)``: the nearest binary64 number to ``x``."""
    return _round_to(Fraction(x), DOUBLE)


def f32(x: Number) -> Fraction:
    """The nearest binary32 number to ``x`` (what a float32 tensor holds)."""
    return _round_to(Fraction(x), SINGLE)


def div(a: Number, b: Number, bits: int = DOUBLE) -> Fraction:
    """``a / b`` in floating point (both operands already exact floats or small integers)."""
    return _round_to(Fraction(a) / Fraction(b), bits)


def mul(a: Number, b: Number, bits: int = DOUBLE) -> Fraction:
    """``a * b`` in floating point."""
    return _round_to(Fraction(a) * Fraction(b), bits)


def add(a: Number, b: Number, bits: int = DOUBLE) -> Fraction:
    """``a + b`` in floating point."""
    return _round_to(Fraction(a) + Fraction(b), bits)


def sqrt(a: Number) -> Fraction:
    """``math.sqrt(a)``: the correctly rounded binary64 square root of ``a`` (a >= 0)."""
    a = Fraction(a)
    if a == 0:
        return a
    # root = m * 2**e with m of DOUBLE bits: m is sqrt(a / 4**e) rounded to an integer
    e = (a.numerator.bit_length() - a.denominator.bit_length()) // 2 - DOUBLE
    while True:
        scaled = a / _pow2(2 * e)
        m = isqrt(scaled.__floor__())
        if m >= 1 << DOUBLE:
            e += 1
        elif m < 1 << (DOUBLE - 1):
            e -= 1
        else:
            break
    # round to nearest: the root is above m + 1/2 exactly when scaled > (m + 1/2)**2
    if scaled > Fraction((2 * m + 1) ** 2, 4):
        m += 1
    return m * _pow2(e)


def floor(x: Number) -> int:
    """``math.floor(x)`` (and ``int(x)`` for x >= 0)."""
    return Fraction(x).__floor__()


def ceil(x: Number) -> int:
    """``math.ceil(x)``."""
    return Fraction(x).__ceil__()


def round_half_even(x: Number) -> int:
    """Python's ``round(x)``: the nearest integer, ties to even."""
    return round(Fraction(x))
