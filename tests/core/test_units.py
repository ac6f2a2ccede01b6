"""The size grammar: exact values, loud refusals, formatter round trips."""

from __future__ import annotations

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mmpool_cli.core.units import (
    BINARY_UNITS,
    DECIMAL_UNITS,
    SIZE_PATTERN,
    format_binary,
    format_bytes,
    format_exact,
    format_size,
    is_whole_binary,
    parse_size,
)
from mmpool_cli.errors import SizeError


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("0", 0),
        ("512", 512),
        ("512B", 512),
        ("4.35MB", 4_350_000),
        ("1.1GB", 1_100_000_000),
        ("1.5KiB", 1_536),
        ("1kB", 1_000),
        ("1KB", 1_000),
        ("1MB", 10**6),
        ("1GB", 10**9),
        ("1TB", 10**12),
        ("1PB", 10**15),
        ("1KiB", 2**10),
        ("1MiB", 2**20),
        ("1GiB", 2**30),
        ("1TiB", 2**40),
        ("1PiB", 2**50),
        ("1Ki", 2**10),
        ("256Mi", 256 * 2**20),
        ("2Gi", 2 * 2**30),
        ("1Ti", 2**40),
        ("1Pi", 2**50),
        ("1 GiB", 2**30),
        ("1   GiB", 2**30),
        ("  1GiB  ", 2**30),
        ("1gB", 10**9),
        ("1giB", 2**30),
        ("1GIB", 2**30),
        ("1gi", 2**30),
        ("0.25GiB", 2**28),
        ("1.0", 1),
        ("1.000GB", 10**9),
        ("007MiB", 7 * 2**20),
        ("6MiB", 6_291_456),
        ("0.000001MB", 1),
    ],
)
def test_parse_exact(text: str, expected: int) -> None:
    assert parse_size(text) == expected


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("", "empty"),
        ("   ", "empty"),
        ("1 gorilla", "not a unit"),
        ("1 gigantic", "not a unit"),
        ("1GB!!", "unexpected text '!!'"),
        ("1GB garbage", "unexpected text"),
        ("3 MiB ram", "unexpected text"),
        ("1,5GB", "commas"),
        ("1,000MB", "commas"),
        ("0.5B", "0.5 bytes, not a whole number"),
        ("0.3KiB", "307.2 bytes"),
        ("1.0000001KB", "1000.0001 bytes"),
        ("-1GB", "negative"),
        ("-0", "negative"),
        ("+1GB", "no sign"),
        ("inf", "finite"),
        ("-inf", "finite"),
        ("nan", "finite"),
        ("Infinity", "finite"),
        ("1Gbit", "bits"),
        ("2 gigabits", "not a unit"),
        ("1Gb", "bits"),
        ("1gb", "bits"),
        ("1Mbps", "bits"),
        ("1Kib", "bits"),
        ("1b", "bits"),
        ("١٢", "ASCII digits"),
        ("１GB", "ASCII digits"),
        ("1G", "ambiguous"),
        ("1k", "ambiguous"),
        ("1M", "ambiguous"),
        ("1T", "ambiguous"),
        ("1p", "ambiguous"),
        ("1e9", "scientific"),
        ("1E3MB", "scientific"),
        (".5GB", "digit before the point"),
        ("5.GB", "digit after the point"),
        ("1_000", "underscores"),
        ("GB1", "number comes before the unit"),
        ("GB", "not a number"),
        ("1.2.3GB", "unexpected text"),
        ("0x800", "hexadecimal is not accepted: sizes are decimal; did you mean 2048?"),
        ("0o17", "octal is not accepted: sizes are decimal; did you mean 15?"),
        (".inf", "a size must be a finite number"),
        ("9" * 80, "longer than"),
        ("1\n2", "U+000A"),
    ],
)
def test_parse_refuses_with_a_reason(text: str, needle: str) -> None:
    with pytest.raises(SizeError) as info:
        parse_size(text)
    message = str(info.value)
    assert needle in message
    assert "\n" not in message
    assert message.startswith("invalid size ")


@pytest.mark.parametrize(
    ("text", "suggestion"),
    [
        ("1G", "1GB or 1GiB"),
        ("1k", "1kB or 1KiB"),
        ("1Gb", "1GB"),
        ("1mib", "1MiB"),
        ("+1GB", "1GB"),
        (".5GB", "0.5GB"),
    ],
)
def test_refusals_suggest_a_fix(text: str, suggestion: str) -> None:
    with pytest.raises(SizeError, match=f"did you mean {suggestion}"):
        parse_size(text)


def test_size_error_is_a_value_error() -> None:
    with pytest.raises(ValueError, match="invalid size"):
        parse_size("1 gorilla")


def test_non_text_is_refused() -> None:
    with pytest.raises(SizeError):
        parse_size(12)  # type: ignore[arg-type]


def test_unit_tables_are_exact_powers() -> None:
    assert list(DECIMAL_UNITS.values()) == [1000**i for i in range(1, 6)]
    assert list(BINARY_UNITS.values()) == [1024**i for i in range(1, 6)]


@pytest.mark.parametrize(
    ("n", "exact", "binary", "whole"),
    [
        (0, "0B", "0 B", True),
        (1023, "1023B", "1023 B", True),
        (1024, "1KiB", "1 KiB", True),
        (1536, "1536B", "1.5 KiB", True),
        (268_435_456, "256MiB", "256 MiB", True),
        (268_288_000, "262000KiB", "255.86 MiB", False),
        (10**9, "1GB", "953.67 MiB", False),
        (4_350_000, "4350kB", "4.15 MiB", False),
        (2**30 - 1, "1073741823B", "1 GiB", False),
    ],
)
def test_formatters(n: int, exact: str, binary: str, whole: bool) -> None:
    assert format_exact(n) == exact
    assert format_binary(n) == binary
    assert is_whole_binary(n) is whole


def test_format_size_marks_rounded_readings() -> None:
    assert format_size(268_435_456) == "268,435,456 B (256 MiB)"
    assert format_size(268_288_000) == "268,288,000 B (≈255.86 MiB)"
    assert format_size(512) == "512 B"
    assert format_bytes(1_073_741_824) == "1,073,741,824 B"


@given(st.integers(min_value=0, max_value=2**63 - 1))
def test_exact_format_round_trips(n: int) -> None:
    assert parse_size(format_exact(n)) == n


@given(st.integers(min_value=1024, max_value=2**62))
def test_binary_reading_is_within_half_a_hundredth(n: int) -> None:
    value, unit = format_binary(n).split()
    whole, _, frac = value.partition(".")
    hundredths = int(whole) * 100 + int((frac + "00")[:2])
    size = BINARY_UNITS[unit]
    # |reading - n| <= half of 0.01 unit, in integers: |hundredths*size - 100n| <= size/2
    assert abs(hundredths * size - 100 * n) * 2 <= size


@given(
    st.integers(min_value=0, max_value=10**12),
    st.integers(min_value=0, max_value=999),
    st.sampled_from([*DECIMAL_UNITS, *BINARY_UNITS, "Ki", "Mi", "Gi"]),
)
def test_decimal_fractions_are_exact(whole: int, thousandths: int, unit: str) -> None:
    size = {**DECIMAL_UNITS, **BINARY_UNITS}.get(unit) or BINARY_UNITS[unit + "B"]
    numerator = (whole * 1000 + thousandths) * size
    text = f"{whole}.{thousandths:03d}{unit}"
    if numerator % 1000:
        with pytest.raises(SizeError, match="not a whole number"):
            parse_size(text)
    elif numerator // 1000 >= 2**63:
        with pytest.raises(SizeError, match="larger than 2"):
            parse_size(text)
    else:
        assert parse_size(text) == numerator // 1000


@given(st.text(max_size=40))
def test_any_text_parses_or_raises_size_error(text: str) -> None:
    try:
        value = parse_size(text)
    except SizeError as e:
        assert "\n" not in str(e) and "\r" not in str(e)
    else:
        assert isinstance(value, int)
        assert value >= 0


@given(st.from_regex(r"[0-9]{1,12}(\.[0-9]{1,6})? ?(B|kB|KB|MB|GB|TB|KiB|MiB|GiB|TiB|Ki|Mi|Gi)?", fullmatch=True))
def test_well_formed_sizes_never_crash(text: str) -> None:
    try:
        assert parse_size(text) >= 0
    except SizeError as e:
        assert "not a whole number" in str(e) or "larger than 2^63" in str(e)


def test_mmpool_refuses_what_humanfriendly_silently_misreads() -> None:
    humanfriendly = pytest.importorskip("humanfriendly")
    # Why mmpool has its own grammar: humanfriendly truncates, ignores junk and reads Gi as 10**9.
    assert humanfriendly.parse_size("0.5B") == 0
    assert humanfriendly.parse_size("1 gorilla") == 10**9
    assert humanfriendly.parse_size("1Gi") == 10**9
    for text in ("0.5B", "1 gorilla"):
        with pytest.raises(SizeError):
            parse_size(text)
    assert parse_size("1Gi") == 2**30


@pytest.mark.parametrize("text", [" 1GiB", "1GiB ", "\t1GiB\t", " \t 512MiB \t"])
def test_ascii_space_and_tab_may_surround_a_size(text: str) -> None:
    assert parse_size(text) in (2**30, 512 * 2**20)


@pytest.mark.parametrize(
    "text",
    ["\x1c1GiB", "1TB\u3000", "\xa01GiB", "1GiB\n", "\r1GiB", "1GiB\x0b", "\x0c1GiB", "\u20281GiB", "1GiB\x85"],
)
def test_only_ascii_space_and_tab_count_as_whitespace(text: str) -> None:
    with pytest.raises(SizeError) as info:
        parse_size(text)
    message = str(info.value)
    assert "U+" in message, message  # names the invisible character
    assert "\n" not in message and "\r" not in message


@pytest.mark.parametrize("length", [65, 4_301, 3 * 2**20])
def test_a_long_size_is_quoted_by_a_short_prefix(length: int) -> None:
    with pytest.raises(SizeError) as info:
        parse_size("9" * length)
    message = str(info.value)
    assert "longer than" in message
    assert f"{length:,} characters" in message
    assert len(message) < 400


def test_a_size_beyond_64_bits_is_refused() -> None:
    assert parse_size("8191PiB") == 8191 * 2**50  # 8192 PiB is 2^63
    with pytest.raises(SizeError, match="larger than"):
        parse_size("8192PiB")


size_like = st.text(alphabet=" \t0123456789.kKmMgGtTpPiIBb\n\x1c\u3000-+", max_size=70) | st.from_regex(
    r"[ \t]{0,2}[0-9]{1,70}(\.[0-9]{1,3})? ?(B|kB|MB|GiB|Mi|Gb|G)?[ \t]{0,2}", fullmatch=True
)


@given(size_like)
def test_the_schema_pattern_accepts_what_parse_size_reads(text: str) -> None:
    # What the pattern cannot say: a whole number of bytes, at most 2^63 - 1 of them.
    try:
        parse_size(text)
        readable = True
    except SizeError as e:
        readable = "not a whole number" in str(e) or "larger than 2^63" in str(e)
    assert bool(re.search(SIZE_PATTERN, text)) is readable
