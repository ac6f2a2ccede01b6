"""The compiled lookups behind a prefix cache (``_behind``) refuse columns that do not describe a traffic,
with one line and no crash; its results are held equal to the Python ones in
tests/engines/sglang/test_cache_lookups.py."""

from __future__ import annotations

from array import array

import pytest

from mmpool_cli.kernels.native import compiled

FAST = compiled("_behind")
pytestmark = pytest.mark.skipif(FAST is None, reason="the compiled kernel is not built")


def _columns() -> dict[str, list[int]]:
    """Two requests: r0 holds images a, a (one lookup, a repeat), r1 a combined batch of two videos."""
    return {
        "bgroup": [0, 1],
        "bcombined": [-1, 2],
        "bstart": [0, 2, 4],
        "iplace": [0, 1, 0, 1],
        "ikey": [0, 0, 1, 3],
        "ikeyed": [1, 1, 1, 1],
        "itokens": [4, 4, 2, 3],
        "rgroup": [1, 0],
        "rstart": [0, 2, 4],
        "rends": [5, 9, 3, 8],
        "gstart": [0, 3, 6],
        "distinct": [0, 1, 1, 0, 1, 2],
    }


def _call(cols: dict[str, list[int]], served: object, row: int = 10) -> tuple:
    assert FAST is not None
    return FAST.lookups(*(array("q", xs) for xs in cols.values()), served, row)


def test_the_lookups_and_what_the_cover_spared() -> None:
    keys, sizes, work, groups, dups, spared, total, repeats, one = _call(_columns(), [0, 0])
    assert [array("q", raw).tolist() for raw in (keys, sizes, work, groups, dups)] == [
        [0, 1],
        [40, 50],
        [4, 5],
        [1, 2],
        [1, 0],
    ]
    assert (spared, total, repeats, one) == (0, 9, 1, True)
    # r1 served past its first video's run: the combined batch is still looked up whole; r0 past its first image
    keys, sizes, work, groups, dups, spared, total, repeats, one = _call(_columns(), [6, 4])
    assert [array("q", raw).tolist() for raw in (keys, dups)] == [[0, 1], [0, 0]]
    assert spared == 2 and repeats == 0
    # every item covered: no lookup at all
    assert _call(_columns(), [10, 9])[:6] == (b"", b"", b"", b"", b"", 3)


@pytest.mark.parametrize(
    ("name", "bad"),
    [
        ("bgroup", [0, 2]),  # a request out of range
        ("bcombined", [-2, 2]),
        ("bstart", [0, 3, 2]),  # not rising
        ("bstart", [0, 2]),  # one batch short
        ("ikey", [0, -1, 1, 3]),
        ("itokens", [4, 4, -2, 3]),
        ("itokens", [4, 4, 2]),
        ("rgroup", [1, 5]),
        ("rstart", [0, 4, 4]),  # a replayed request without items
        ("gstart", [0, 3, 7]),
        ("distinct", [0, 1, 1, 0, 1]),
    ],
)
def test_columns_out_of_range_are_refused(name: str, bad: list[int]) -> None:
    cols = _columns()
    cols[name] = bad
    with pytest.raises(ValueError, match="out of range|of one length|without items"):
        _call(cols, [0, 0])


def test_a_cover_past_a_request_s_items_is_refused() -> None:
    cols = _columns()
    cols["gstart"], cols["distinct"] = [0, 2, 6], [0, 1, 0, 1, 1, 2]  # r0's counts one short
    with pytest.raises(ValueError, match="covers more items"):
        _call(cols, [0, 10])


@pytest.mark.parametrize("served", [[0], [0, 0, 0], array("i", [0, 0]), b"\0" * 16, ["0", 0], 5])
def test_served_of_another_length_or_type_is_refused(served: object) -> None:
    with pytest.raises((ValueError, TypeError)):
        _call(_columns(), served)


def test_bytes_past_int64_are_refused() -> None:
    with pytest.raises(ValueError, match="out of range"):
        _call(_columns(), [0, 0], row=1 << 60)  # 4 tokens: 2**62 bytes
    assert _call(_columns(), [0, 0], row=1 << 59)[5:] == (0, 9, 1, True)
    cols = _columns()
    cols["itokens"] = [4, 4, (1 << 63) - 1, 3]  # the combined batch's tokens past int64
    with pytest.raises(ValueError, match="out of range"):
        _call(cols, [0, 0], row=1)
    cols["itokens"] = [1 << 62, 4, 1 << 62, 1 << 62]  # the tokens summed past int64, of no bytes
    cols["bcombined"] = [-1, -1]
    with pytest.raises(ValueError, match="out of range"):
        _call(cols, [0, 0], row=0)


def test_lists_laid_end_to_end() -> None:
    assert FAST is not None
    starts, values = FAST.flat([[3, 1], [], [True, -(2**63)]], -1)
    assert array("q", starts).tolist() == [0, 2, 2, 4] and array("q", values).tolist() == [3, 1, 1, -(2**63)]
    starts, values = FAST.flat([[(0, "a", 5)], [(1, None, 6), (2, "b", 7)]], 2)
    assert array("q", starts).tolist() == [0, 1, 3] and array("q", values).tolist() == [5, 6, 7]
    assert FAST.flat([], 0) == (b"\0" * 8, b"")


@pytest.mark.parametrize(
    ("lists", "field"),
    [((1, 2), -1), ([(1, 2)], -1), ([[1.0]], -1), ([["1"]], -1), ([[(1,)]], 1), ([[5]], 0), ([[2**63]], -1)],
)
def test_lists_of_anything_but_ints_are_refused(lists: object, field: int) -> None:
    assert FAST is not None
    with pytest.raises((TypeError, OverflowError)):
        FAST.flat(lists, field)
