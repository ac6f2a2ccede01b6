"""The embedding cache's lookups behind the radix cache at any capacity (``Behind.lookups``: compiled in
``kernels/_behind.c`` where it was built) against the reference, ``embedding_lookups`` over the items
``prefix.covered_by`` finds, and the chain ``tune`` reads at each size (``embedding_at``) against the
Python one-pass curve it stands for, on random traffics: an item repeated in a request, Qwen3-VL's
combined video lookups, items without a key, requests replayed in another order or not at all, a key
whose items differ in size, and every number of covered items from none to all."""

from __future__ import annotations

import random
from array import array
from types import SimpleNamespace

import pytest

from mmpool_cli.caches import curve as curve_module
from mmpool_cli.caches import replay as replay_module
from mmpool_cli.caches.curve import lru_curve
from mmpool_cli.caches.replay import Lookups, one_pass, replay_counts
from mmpool_cli.caches.report import CacheItem
from mmpool_cli.engines.sglang import cache_lookups, prefix, tune_scores
from mmpool_cli.engines.sglang.cache_lookups import Behind, embedding_lookups, looked_up_work, modal_batches

COMPILED = [False, True] if cache_lookups.FAST is not None else [False]
WIDTH = 3


def _traffic(rng: random.Random) -> tuple[SimpleNamespace, list[int], list, SimpleNamespace]:
    """A random traffic: its request, its items' tokens, its requests' items and the radix replay's
    requests (each request's items and the last offsets of their runs, rising), in a random order."""
    keys = [f"k{j}" for j in range(rng.randint(1, 6))]
    tokens_of = {key: rng.choice([1, 2, 4, 9, 30]) for key in keys}
    items: list[CacheItem] = []
    tokens: list[int] = []
    for r in range(rng.randint(1, 14)):
        for _ in range(rng.randint(1, 6)):
            key = rng.choice(keys) if rng.random() < 0.8 else None  # None: an item without a content key
            kind = "video" if rng.random() < 0.35 else "image"
            items.append(CacheItem(f"r{r}", kind, key, 0))
            # an item of a key has that key's tokens, but now and then another size of it
            n = tokens_of[key] if key is not None and rng.random() < 0.9 else rng.choice([1, 3, 7])
            tokens.append(n)
    req = SimpleNamespace(family=SimpleNamespace(name=rng.choice(["qwen3-vl", "qwen2.5-vl"])), items=items)
    groups = list(prefix.requests_of(items))
    replayed = []
    for group in groups:
        end = rng.randint(0, 3)
        ends = []
        for i, _ in group:
            ends.append((i, end))
            end += rng.randint(1, 5)
        if rng.random() < 0.9 or not replayed:  # a request the replay left out covers nothing
            replayed.append(ends)
    rng.shuffle(replayed)  # replayed in another order than they came
    return req, tokens, groups, SimpleNamespace(last_ends=replayed)


def _served(rng: random.Random, built: SimpleNamespace, cover: str) -> list[int]:
    """Each replayed request's prefix served: nothing, past every item, or anywhere around its items' ends."""
    out = []
    for items in built.last_ends:
        ends = [end for _, end in items]
        if cover == "none":
            out.append(rng.choice([0, ends[0]]))
        elif cover == "all":
            out.append(ends[-1] + rng.randint(1, 3))
        else:
            end = rng.choice(ends)
            out.append(max(0, end + rng.choice([-1, 0, 1])))
    return out


def _plain(looks: cache_lookups._Lookups) -> tuple[list[int], ...]:
    return tuple(list(xs) for xs in (looks.keys, looks.sizes, looks.weights, looks.work, looks.groups, looks.dups))


@pytest.fixture(params=COMPILED, ids=lambda c: "compiled" if c else "python")
def compiled(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> bool:
    if not request.param:
        monkeypatch.setattr(cache_lookups, "FAST", None)
    return bool(request.param)


@pytest.mark.parametrize("seed", range(60))
def test_the_lookups_behind_equal_those_made_item_by_item(seed: int, compiled: bool) -> None:
    rng = random.Random(seed)
    req, tokens, groups, built = _traffic(rng)
    batches = modal_batches(req, tokens)
    behind = Behind(batches, groups, built)
    assert behind.exact and (behind._flat is not None) == compiled
    covered_counts = set()
    for cover in ["none", "all"] + ["some"] * 6:
        served = _served(rng, built, cover)
        looks, spared = behind.lookups(served, WIDTH)
        covered = prefix.covered_by(built, served)
        want = embedding_lookups(req, tokens, WIDTH, covered, batches)
        assert _plain(looks) == _plain(want)
        k = behind.covers(served)
        assert _plain(looks) == _plain(behind.at(k, WIDTH))
        assert spared == prefix.spared(groups, covered) == behind.spared(k)
        assert looked_up_work(looks) == looked_up_work(want)
        assert cache_lookups.one_size(looks) == cache_lookups.one_size(want)
        covered_counts.add(len(covered))
    assert 0 in covered_counts and len(covered_counts) > 1


def test_served_is_read_from_a_list_or_int64_array(compiled: bool) -> None:
    rng = random.Random(7)
    req, tokens, groups, built = _traffic(rng)
    behind = Behind(modal_batches(req, tokens), groups, built)
    served = _served(rng, built, "some")
    looks, spared = behind.lookups(served, WIDTH)
    again, spared_again = behind.lookups(array("q", served), WIDTH)
    assert (_plain(again), spared_again) == (_plain(looks), spared)


def test_items_out_of_their_order_in_the_prompt_are_walked_item_by_item() -> None:
    items = [CacheItem("r0", "image", "a", 0), CacheItem("r0", "image", "b", 0)]
    req = SimpleNamespace(family=SimpleNamespace(name="qwen2.5-vl"), items=items)
    groups = list(prefix.requests_of(items))
    built = SimpleNamespace(last_ends=[[(0, 9), (1, 4)]])  # the second item's run ends first
    behind = Behind(modal_batches(req, [1, 1]), groups, built)
    assert not behind.exact and behind._flat is None


def _reference_at(looks: cache_lookups._Lookups, sizes: list[int]) -> list[tuple[int, int, int]]:
    """What ``embedding_at`` stands for, in Python: the one-pass curve where one pass is exact, else a
    replay at each size; the lookups less the repeats of the items that hit."""
    lk = looks.neutral()
    exact = one_pass(lk)
    if exact is not None:
        curve = lru_curve(looks.keys, exact, looks.weights, looks.work, groups=looks.groups, native=False)
        at = [curve.at(size) if size > 0 else (0, 0) for size in sizes]
    else:
        at = [replay_counts(lk, size, native=False)[:2] if size > 0 else (0, 0) for size in sizes]
    dups = list(looks.dups or [])
    repeats = Lookups(looks.keys, looks.sizes, dups, [0] * len(dups), looks.groups)
    counted = [
        len(looks.keys) + sum(dups) - (replay_counts(repeats, size, native=False)[0] if size > 0 else 0)
        for size in sizes
    ]
    return [(h, w, n) for (h, w), n in zip(at, counted, strict=True)]


@pytest.mark.parametrize("seed", range(60))
def test_the_embedding_cache_read_at_each_size_is_the_one_pass_curve(
    seed: int, compiled: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    rng = random.Random(seed)
    req, tokens, groups, built = _traffic(rng)
    batches = modal_batches(req, tokens)
    behind = Behind(batches, groups, built)
    if not compiled:  # the replays in Python too
        monkeypatch.setattr(replay_module, "FAST", None)
        monkeypatch.setattr(curve_module, "FAST", None)
    for cover in ("none", "some", "all"):
        served = _served(rng, built, cover)
        looks, _ = behind.lookups(served, WIDTH)
        top = sum(looks.sizes) + 2 * WIDTH
        many = rng.random() < 0.3  # more sizes than a replay at each is read for: the curve
        sizes = [0, top, *(rng.randint(0, top) for _ in range(40 if many else rng.randint(0, 6)))]
        want = _reference_at(embedding_lookups(req, tokens, WIDTH, prefix.covered_by(built, served), batches), sizes)
        assert tune_scores.embedding_at(looks, sizes) == want
