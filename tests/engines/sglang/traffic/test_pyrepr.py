"""The repr reader of SGLang's text request log."""

from __future__ import annotations

import pytest

from mmpool_cli.engines.sglang.traffic.pyrepr import Call, Cut, ReprError, read


def test_values() -> None:
    text = "X(a='q\\'s', b=[1, -2.5, None, True], c={'k': (1, 2)}, d=Y(url=\"u\"), e=<Enum.A: 1>)"
    with pytest.raises(ReprError):
        read(text)  # '<...>' object reprs are not read
    value, end = read(text[: text.index(", e=")] + ")")
    assert isinstance(value, Call) and value.name == "X"
    assert value.fields == {"a": "q's", "b": [1, -2.5, None, True], "c": {"k": [1, 2]}, "d": Call("Y", {"url": "u"})}


def test_cut_strings_and_lists() -> None:
    value, _ = read("['abc' ... 'xyz']")
    assert value == [Cut("abc", "xyz")]
    value, _ = read("[1, 2] ... [8, 9]")
    assert value == [1, 2, 8, 9]


def test_wanted_fields_stop_the_read_early() -> None:
    value, end = read("G(rid='r', image_data=['a'], later=<unreadable>)", want=frozenset({"rid", "image_data"}))
    assert value == Call("G", {"rid": "r", "image_data": ["a"]})


@pytest.mark.parametrize("text", ["G(rid='r'", "['a' ... 3]", "{1 2}", "G(=1)", "[" * 100 + "]" * 100])
def test_malformed(text: str) -> None:
    with pytest.raises(ReprError):
        read(text)
