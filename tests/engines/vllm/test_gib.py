"""GiB flags read as vLLM reads them, checked against vLLM 0.34.0's maybe_init_mm_gpu_ipc_pool."""

from __future__ import annotations

from fractions import Fraction

import pytest

from mmpool_cli.engines.vllm import gib


def test_bytes_match_vllms_int_of_the_float_product(recorded):
    for row in recorded["gpu_pool"]:
        if row["processes"] == 1 and "total_bytes" in row:
            assert gib.parse("--mm-ipc-gpu-memory-gb", row["gb"]).bytes == row["total_bytes"], row


def test_the_lru_capacity_is_the_same_figure(recorded):
    # MultiModalCache.get_lru_cache(gb) holds an item of n bytes iff n <= GiB_bytes * gb
    for row in recorded["lru"]:
        if row["gb"] == "inf":
            continue
        cap = gib.parse("--mm-processor-cache-gb", row["gb"]).bytes
        assert row["probe"] == [cap - 1, cap, cap + 1]
        assert row["fits"] == [True, True, False]


def test_a_decimal_the_float_rounds_is_flagged_and_the_float_wins():
    v = gib.parse("--mm-processor-cache-gb", "0.99999999999999999999")
    assert v.bytes == 1 << 30
    assert v.rounded and v.written == Fraction("0.99999999999999999999")
    assert not gib.parse("--mm-processor-cache-gb", "0.5").rounded


def test_spellings_float_accepts_beyond_plain_digits():
    v = gib.parse("--mm-processor-cache-gb", "4_0")
    assert v.bytes == 40 << 30 and v.odd_spelling
    assert gib.parse("--mm-processor-cache-gb", " 4 ").written == 4


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("x", "invalid float value: 'x'"),
        ("1GB", "invalid float value"),
        ("0x10", "invalid float value"),
        ("", "invalid float value"),
        ("-1", "greater than or equal to 0"),
        ("-0.5", "greater than or equal to 0"),
        ("nan", "greater than or equal to 0"),
        ("inf", "infinity"),
        ("1e309", "infinity"),
        ("1e300", "infinity"),
        ("9" * 65, "65 characters"),
    ],
)
def test_refusals_are_one_line_and_name_the_flag(text, says):
    with pytest.raises(gib.GibError) as e:
        gib.parse("--mm-processor-cache-gb", text)
    assert says in str(e.value) and "\n" not in str(e.value)
    assert "--mm-processor-cache-gb" in str(e.value)


def test_the_refusals_agree_with_vllms_parser_on_what_is_not_a_float(probes):
    for probe in probes:
        argv = probe["argv"]
        if argv[1:2] != ["--mm-processor-cache-gb"]:
            continue
        text = argv[2]
        errors = [o["error"] for o in probe["outcomes"] if "error" in o]
        if errors:
            with pytest.raises(gib.GibError, match="invalid float value"):
                gib.parse(argv[1], text)
        else:
            try:
                gib.parse(argv[1], text)
            except gib.GibError as e:  # parsed, then refused by the config or int()
                assert "invalid float value" not in str(e)
