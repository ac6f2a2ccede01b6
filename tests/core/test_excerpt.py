"""Quoting input in messages: short things whole, long things by a prefix and their length."""

from __future__ import annotations

from mmpool_cli.core.excerpt import SHOWN, excerpt, shorten


def test_short_text_is_its_repr() -> None:
    assert excerpt("1 GiB") == "'1 GiB'"
    assert excerpt("x" * SHOWN) == repr("x" * SHOWN)


def test_long_text_is_a_prefix_and_a_length() -> None:
    text = "9" * (3 * 2**20)
    quoted = excerpt(text)
    assert quoted == f"'{'9' * SHOWN}…' ({len(text):,} characters)"


def test_control_characters_stay_escaped() -> None:
    assert "\n" not in excerpt("a\nb" * 100)


def test_shorten_keeps_short_text_and_cuts_long_text() -> None:
    assert shorten("--tp-size") == "--tp-size"
    assert shorten("k" * 100) == "k" * SHOWN + "…"
