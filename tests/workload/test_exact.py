"""The float emulation matches CPython's float operations bit for bit."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from mmpool_cli.workload import exact as fp

ints = st.integers(min_value=1, max_value=10**12)
floats = st.floats(min_value=1e-6, max_value=1e12, allow_nan=False, allow_infinity=False)


@given(ints, ints)
def test_div_of_integers_is_python_true_division(a: int, b: int) -> None:
    assert fp.div(a, b) == Fraction(a / b)


@given(floats, floats)
def test_div_mul_add_of_floats(a: float, b: float) -> None:
    assert fp.div(Fraction(a), Fraction(b)) == Fraction(a / b)
    assert fp.mul(Fraction(a), Fraction(b)) == Fraction(a * b)
    assert fp.add(Fraction(a), Fraction(b)) == Fraction(a + b)


@given(floats)
def test_sqrt_is_math_sqrt(a: float) -> None:
    assert fp.sqrt(Fraction(a)) == Fraction(math.sqrt(a))


@given(st.integers(min_value=1, max_value=1 << 23), st.integers(min_value=1, max_value=1 << 20))
def test_single_precision_division_is_float32_division(a: int, b: int) -> None:
    assert fp.div(a, b, fp.SINGLE) == Fraction(float(np.float32(a) / np.float32(b)))


def test_f64_of_a_decimal_is_float_of_its_text() -> None:
    assert fp.f64(Fraction("1.05")) == Fraction(1.05)
    assert fp.f64(Fraction("29.97")) == Fraction(29.97)
