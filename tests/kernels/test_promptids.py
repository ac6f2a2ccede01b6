"""The compiled placing of items in prompts (``_promptids``) refuses arguments that do not describe requests,
with one line and no crash, and holds no reference it does not hand back; its results are held equal to the
Python ones in tests/engines/sglang/test_prompt_ids.py."""

from __future__ import annotations

import sys
from array import array
from typing import Any

import pytest

from mmpool_cli.caches.report import CacheItem
from mmpool_cli.kernels.native import compiled

FAST = compiled("_promptids")
pytestmark = pytest.mark.skipif(FAST is None, reason="the compiled kernel is not built")
ITEM = CacheItem("r", "image", "a", 1, "image")


def run(item: CacheItem, index: int) -> array[int]:
    return array("q", [7, 1, 2, 9])


@pytest.mark.parametrize(
    ("args", "error", "match"),
    [
        (([], [[]], [], {}, run, 1), ValueError, "one group per request"),
        (([], [], [], {}, run, -1), ValueError, "negative"),
        (((), [], [], {}, run, 1), TypeError, "list"),
        (([], [], [], [], run, 1), TypeError, "dict"),
        (([["image"]], [[(0, ITEM)]], [2], {}, len, 1), TypeError, "len"),  # make takes (item, index)
        (([["image"]], [[(0, ITEM)]], [2], {}, lambda item, index: 1 / 0, 1), ZeroDivisionError, "division"),
        (([["image"]], [[(0, ITEM)]], [], {}, run, 1), IndexError, "range"),
    ],
)
def test_bad_arguments_are_refused(args: tuple[Any, ...], error: type[Exception], match: str) -> None:
    assert FAST is not None
    with pytest.raises(error, match=match):
        FAST.assemble(*args)


def test_no_segments_place_nothing() -> None:
    assert FAST is not None
    assert FAST.assemble([None, None], [[(0, ITEM)], []], [2], {}, run, 1) == ([None, None], [])


def test_no_reference_is_kept_or_lost() -> None:
    assert FAST is not None
    text, kept = array("q", [5, 6]), array("q", [7, 1, 2, 9])
    segs = [text, "image", text]
    group = [(0, ITEM)]
    padded = {("a", 2): kept}
    watched = [text, kept, segs, group, ITEM, "image", padded]
    before = [sys.getrefcount(x) for x in watched]
    for _ in range(50):
        placed, redo = FAST.assemble([segs, segs, None], [group, group, group], [2], padded, run, 1)
        assert placed[0] == (array("q", [5, 6, 7, 1, 2, 9, 5, 6]), [(0, [(3, 4)])]) and placed[2] is None
        assert redo == []
        del placed, redo
        # a text run the reference must place: handed back
        odd = [[5], "image"]
        placed, redo = FAST.assemble([odd], [group], [2], padded, run, 1)
        assert placed == [None] and redo == [0]
        del placed, redo, odd
    assert [sys.getrefcount(x) for x in watched] == before
