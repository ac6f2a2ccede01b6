"""The compiled placing of items in prompts (``kernels/_promptids.c``) gives what ``prompt_ids.place``, the
reference, gives: on random prompts with items placed, of a kind the prompt does not name, more or fewer
than the prompt's, unkeyed, of two kinds, empty text runs, requests without a prompt, and what only the
reference handles (which the compiled one hands back to it)."""

from __future__ import annotations

import random
from array import array
from typing import Any

import pytest

from mmpool_cli.caches.report import CacheItem
from mmpool_cli.engines.sglang import prompt_ids
from mmpool_cli.inputs.traffic.tokens import Segment

pytestmark = pytest.mark.skipif(prompt_ids.FAST is None, reason="the compiled kernel is not built")
WRAP = 2


def same(prompt: Any) -> Any:
    """The prompts here are their segments already."""
    return prompt


def make_with(tokens: list[int], made: list[int] | None = None) -> prompt_ids.Make:
    def make(item: CacheItem, index: int) -> array[int]:
        if made is not None:
            made.append(index)
        seed = sum(map(ord, item.key)) if item.key is not None else -index - 1
        return array("q", [7, 8, *(seed * 100 + k % 4 for k in range(tokens[index])), 9])

    return make


def both(prompts: list[Any], groups: list[list[tuple[int, CacheItem]]], tokens: list[Any]) -> tuple[Any, Any]:
    """The compiled and the reference placing, each with the runs it made (in order)."""
    got = []
    for fast in (prompt_ids.FAST, None):
        made: list[int] = []
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(prompt_ids, "FAST", fast)
            placed = prompt_ids.place_all(prompts, same, groups, tokens, make_with(tokens, made), WRAP)
        got.append((placed, made))
    return got[0], got[1]


def random_requests(seed: int, n: int) -> tuple[list[Any], list[list[tuple[int, CacheItem]]], list[int]]:
    rng = random.Random(seed)
    prompts: list[list[Segment] | None] = []
    groups: list[list[tuple[int, CacheItem]]] = []
    tokens: list[int] = []
    for r in range(n):
        kinds = [rng.choice(["image", "image", "video"]) for _ in range(rng.randrange(4))]
        segs: list[Segment] = []
        for kind in kinds:
            segs.append(array("q", [rng.randrange(50) for _ in range(rng.randrange(4))]))  # empty ones too
            segs.append(kind)
        if rng.random() < 0.7:
            segs.append(array("q", [rng.randrange(50) for _ in range(rng.randrange(3))]))
        group_kinds = list(kinds)
        fate = rng.random()
        if fate < 0.1 and group_kinds:
            group_kinds[rng.randrange(len(group_kinds))] = "audio"  # a kind the prompt does not name
        elif fate < 0.2:
            group_kinds.append("image")  # more items than the prompt places
        elif fate < 0.3 and group_kinds:
            group_kinds.pop()  # fewer
        group = []
        for kind in group_kinds:
            index = len(tokens)
            tokens.append(rng.randrange(0, 9))
            key = rng.choice([None, f"k{rng.randrange(5)}", f"k{r}"])
            group.append((index, CacheItem(f"r{r}", kind, key, 1, kind)))
        groups.append(group)
        prompts.append(None if rng.random() < 0.05 else segs)
    return prompts, groups, tokens


@pytest.mark.parametrize("seed", range(8))
def test_random_prompts_are_placed_as_the_reference_places_them(seed: int) -> None:
    prompts, groups, tokens = random_requests(seed, 400)
    fast, ref = both(prompts, groups, tokens)
    assert fast == ref
    placed = [got for got in fast[0] if got is not None]
    assert all(type(ids) is array and ids.typecode == "q" for ids, _ in placed)
    assert 100 < len(placed) < 400  # some placed, some not


def test_what_is_placed_where() -> None:
    img = CacheItem("r", "image", "a", 1, "image")
    vid = CacheItem("r", "video", None, 1, "video")
    tokens = [3, 2]
    group = [(0, img), (1, vid)]
    a, b = array("q", [1, 2]), array("q", [])
    fast, ref = both(
        [[a, "image", b, "video", a], None, [a, "video", "image"], [a, "image"], [a, "image", "video", "image"], []],
        [group, group, group, group, group, []],
        tokens,
    )
    assert fast == ref
    placed, made = fast
    run_a = [7, 8, 9700, 9701, 9702, 9]
    run_v = [7, 8, -200, -199, 9]
    assert list(placed[0][0]) == [1, 2, *run_a, *run_v, 1, 2]
    # each pad run after the wrap's ids, its end inclusive
    assert placed[0][1] == [(0, [(4, 6)]), (1, [(10, 11)])]
    # no prompt; kinds in another order; fewer items than the request's; more
    assert placed[1:5] == [None, None, None, None]
    assert placed[5] is not None and list(placed[5][0]) == [] and placed[5][1] == []
    assert made == [0, 1]  # each run made once, where first placed


def test_a_run_is_made_once_per_key_and_tokens() -> None:
    items = [CacheItem("r", "image", k, 1, "image") for k in ("a", "a", None, None, "a")]
    tokens = [2, 2, 2, 2, 3]
    groups = [[(i, it)] for i, it in enumerate(items)]
    fast, ref = both([["image"]] * 5, groups, tokens)
    assert fast == ref
    assert fast[1] == [0, 2, 3, 4]  # keyed items share a run; unkeyed ones do not; other tokens, another run


@pytest.mark.parametrize(
    "odd",
    [
        "list-run",  # a text run as a list: the reference extends with it
        "list-pair",  # an entry not a tuple
        "bool-tokens",  # a count that is no int
        "huge-tokens",  # a count past int64
        "tuple-group",  # a group not a list
        "tuple-prompt",  # segments in a tuple (handled alike)
    ],
)
def test_what_only_the_reference_handles_is_handed_to_it(odd: str) -> None:
    item = CacheItem("r", "image", "a", 1, "image")
    segs: Any = [array("q", [5]), "image", array("q", [6])]
    group: Any = [(0, item)]
    tokens: list[Any] = [2]
    if odd == "list-run":
        segs[0] = [5]
    elif odd == "list-pair":
        group = [[0, item]]
    elif odd == "bool-tokens":
        tokens = [True]
    elif odd == "tuple-group":
        group = ((0, item),)
    elif odd == "tuple-prompt":
        segs = tuple(segs)
    make = make_with(tokens)
    if odd == "huge-tokens":
        tokens = [1 << 70]

        def make(item: CacheItem, index: int) -> array[int]:  # the reference makes no such run either
            return array("q", [7, 8, 1, 9])

    fast = prompt_ids.place_all([segs, segs], same, [group, group], tokens, make, WRAP)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(prompt_ids, "FAST", None)
        ref = prompt_ids.place_all([segs, segs], same, [group, group], tokens, make, WRAP)
    assert fast == ref and fast[0] is not None
    assert fast[0][1] == [(0, [(3, 3 + tokens[0] - 1)])]
    assert prompt_ids.FAST is not None
    _, redo = prompt_ids.FAST.assemble([segs, None], [group, group], tokens, {}, make, WRAP)
    assert redo == ([] if odd == "tuple-prompt" else [0])  # handed back (a tuple of segments is read alike)


def test_errors_are_the_references() -> None:
    item = CacheItem("r", "image", "a", 1, "image")

    def broken(item: CacheItem, index: int) -> array[int]:
        raise RuntimeError("no run")

    for fast in (prompt_ids.FAST, None):
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(prompt_ids, "FAST", fast)
            with pytest.raises(RuntimeError, match="no run"):
                prompt_ids.place_all([["image"]], same, [[(0, item)]], [1], broken, WRAP)
            bad = CacheItem("r", "image", [], 1, "image")  # type: ignore[arg-type]
            with pytest.raises(TypeError, match="unhashable"):  # a key the runs cannot be looked up by
                prompt_ids.place_all([["image"]], same, [[(0, bad)]], [1], make_with([1]), WRAP)
            with pytest.raises(IndexError):
                prompt_ids.place_all([["image"]], same, [[(3, item)]], [1], make_with([1]), WRAP)
