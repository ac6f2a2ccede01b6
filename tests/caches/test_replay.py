"""The exact per-size replay of a byte-counted LRU, and when one pass gives the same hits at every size."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mmpool_cli.caches.curve import FAST, lru_curve
from mmpool_cli.caches.replay import (
    Lookups,
    bisect_setting,
    first_setting,
    never_evicts,
    one_pass,
    replay,
    replay_counts,
    replay_many,
)


def _batched(rng: random.Random, n: int, exact: bool, shared: bool) -> Lookups:
    """Random batches; with ``exact`` only the shapes one pass holds (one re-used key, first; where
    bytes are shared, several keys only when none of them comes back)."""
    keys: list[int] = []
    groups: list[int] = []
    fresh = 0
    seen: list[int] = []
    for g in range(n):
        width = 1 if rng.random() < 0.6 else rng.randint(2, 4)
        batch: list[int] = []
        if (width == 1 or not exact or not shared) and seen and rng.random() < 0.7:
            batch.append(rng.choice(seen))
        while len(batch) < width:
            if not exact and seen and rng.random() < 0.5:
                k = rng.choice(seen)
                if k in batch:
                    continue
            else:
                k, fresh = fresh, fresh + 1
            batch.append(k)
        if not (exact and shared and width > 1):
            seen.extend(k for k in batch if k not in seen)
        keys.extend(batch)
        groups.extend([g] * len(batch))
    size_of = {k: rng.choice([1, 2, 3, 5, 8, 40]) for k in set(keys)}
    return Lookups(
        keys=keys,
        sizes=[size_of[k] for k in keys],
        weights=[rng.randint(1, 3) for _ in keys],
        work=[rng.randint(0, 5) for _ in keys],
        groups=groups,
        shared=[size_of[k] for k in keys] if shared else None,
        max_entries=rng.choice([0, 0, 3]),
    )


@pytest.mark.parametrize("seed", range(40))
def test_one_pass_equals_the_replay_at_every_size_where_it_says_it_is_exact(seed: int) -> None:
    rng = random.Random(seed)
    shared = seed % 2 == 1
    lk = _batched(rng, 60, exact=True, shared=shared)
    exact = one_pass(lk)
    assert exact is not None
    curve = lru_curve(lk.keys, exact, lk.weights, lk.work, groups=lk.groups, max_entries=lk.max_entries, again=lk.again)
    for size in range(never_evicts(lk) + 2):
        assert curve.at(size) == replay(lk, size), size


@pytest.mark.parametrize("native", [False, True] if FAST is not None else [False])
def test_one_pass_follows_a_batch_that_reorders(native: bool) -> None:
    # batch 1 is a new key then a re-used one: at 4 B the re-used one misses and is stored last (so it
    # hits in batch 2), where it hits it is used first; the batch leaves an order of each size, and one
    # pass counts what follows the key in the order of that size
    lk = Lookups(keys=[2, 3, 0, 2, 2], sizes=[3, 3, 2, 3, 3], weights=[1] * 5, work=[0] * 5, groups=[0, 0, 1, 1, 2])
    exact = one_pass(lk)
    assert exact is not None
    assert replay(lk, 4) == (1, 0)
    curve = lru_curve(lk.keys, exact, lk.weights, lk.work, groups=lk.groups, native=native)
    for size in range(12):
        assert curve.at(size) == replay(lk, size), size


def test_one_pass_is_refused_where_bytes_are_shared_or_a_batch_is_wide() -> None:
    from mmpool_cli.caches.replay import ONE_PASS_BATCH

    lk = Lookups(keys=[0, 0, 1], sizes=[1] * 3, weights=[1] * 3, work=[0] * 3, groups=[0, 1, 1], shared=[1] * 3)
    assert one_pass(lk) is None  # 0 is in two batches, one of them of two keys: its bytes depend on 1's
    wide = list(range(ONE_PASS_BATCH + 1))
    assert one_pass(Lookups(wide, [1] * len(wide), [1] * len(wide), [0] * len(wide), [0] * len(wide))) is None
    wide.pop()
    assert one_pass(Lookups(wide, [1] * len(wide), [1] * len(wide), [0] * len(wide), [0] * len(wide))) is not None


def test_shared_bytes_depend_on_what_missed() -> None:
    # batch 2 is a re-used image (0) and a new one (1), each entry 10 B of its own plus a view of the
    # batch (100 B a miss): 210 B each where both missed, 110 B for 1 where 0 hit
    lk = Lookups(
        keys=[0, 2, 0, 1, 1],
        sizes=[10] * 5,
        weights=[1] * 5,
        work=[1] * 5,
        groups=[0, 1, 2, 2, 3],
        shared=[100, 150, 100, 100, 100],
    )
    assert one_pass(lk) is None
    assert replay(lk, 160) == (0, 0)  # batch 2's entries (210 B) are not admitted
    assert replay(lk, 210) == (1, 1)  # 0 was evicted by 2: both miss, 1 stored at 210 B, hits in batch 3
    assert replay(lk, 270) == (2, 2)  # 0 and 2 both held: 0 hits, 1 stored at 110 B
    assert never_evicts(lk) == 210 + 160 + 210
    assert replay(lk, never_evicts(lk)) == replay(lk, 10**9)


def test_a_repeat_in_a_batch_moves_a_hit_again_and_a_miss_is_stored_once() -> None:
    # batch [a, b, a]: both hit, a moved last; a 2-entry cache then evicts b, not a, for c
    lk = Lookups(
        keys=[0, 1, 0, 1, 0, 2, 0, 1],
        sizes=[1] * 8,
        weights=[1] * 8,
        work=[1] * 8,
        groups=[0, 0, 1, 1, 1, 2, 3, 4],
    )
    assert replay(lk, 2) == (4, 4)  # batch 1: a, b, a hit; c evicts b; a hits; b misses
    lk2 = Lookups(keys=[0, 0], sizes=[1, 1], weights=[1, 1], work=[1, 1], groups=[0, 0])
    assert replay(lk2, 5) == (0, 0)  # both lookups miss (nothing stored before the batch ends)


def test_settings() -> None:
    steps = ((0, 0, 0), (10, 5, 0), (13, 2, 0), (30, 6, 0))  # hits fall back between 13 and 30

    def size_of(m: int) -> int:
        return 4 * m

    def setting_of(n: int) -> int:
        return -(-n // 4)

    assert first_setting(steps, 5, setting_of, size_of) == 3  # 12 B: inside [10, 13)
    assert first_setting(steps, 6, setting_of, size_of) == 8
    assert first_setting(((0, 0, 0), (10, 5, 0), (11, 2, 0)), 5, setting_of, size_of) is None  # 12 B misses it
    hits = {4 * m: h for m, h in enumerate([0, 0, 1, 3, 3, 4, 4, 4])}
    assert bisect_setting(lambda n: hits[n], 3, size_of, 7) == 3
    assert bisect_setting(lambda n: hits[n], 4, size_of, 7) == 5


def test_replays_spread_over_workers_give_the_same_points(monkeypatch: pytest.MonkeyPatch) -> None:
    from mmpool_cli.caches import replay as cache_replay

    lk = _batched(random.Random(7), 200, exact=False, shared=True)
    sizes = list(range(0, never_evicts(lk) + 5, 7))
    alone = [replay(lk, size) for size in sizes]
    assert cache_replay.replay_many(lk, sizes) == alone  # small: in this process
    monkeypatch.setattr(cache_replay, "PARALLEL_FROM", 0)
    assert cache_replay.replay_many(lk, sizes, jobs=2) == alone


@st.composite
def batched_lookups(draw: st.DrawFn, one_pass_shape: bool) -> Lookups:
    """Batches of keys with repeats inside a batch, either rule for them, sizes, shared bytes and bounds.

    With ``one_pass_shape`` each batch is at most one key seen before, first, then new keys, then
    repeats of the batch's own keys (where bytes are shared, several keys only when none comes back)."""
    shared = draw(st.booleans())
    keys: list[int] = []
    groups: list[int] = []
    seen: list[int] = []
    fresh = 0
    for g in range(draw(st.integers(0, 25))):
        batch: list[int] = []
        width = draw(st.integers(1, 4))
        if seen and draw(st.booleans()) and not (one_pass_shape and shared and width > 1):
            batch.append(draw(st.sampled_from(seen)))
        while len(set(batch)) < width:
            if not one_pass_shape and seen and draw(st.booleans()):
                batch.append(draw(st.sampled_from(seen)))
            else:
                batch.append(fresh)
                fresh += 1
        for _ in range(draw(st.integers(0, 2))):  # the same item again in the request
            batch.append(draw(st.sampled_from(batch)))
        if not (one_pass_shape and shared and len(set(batch)) > 1):
            seen.extend(k for k in dict.fromkeys(batch) if k not in seen)
        keys.extend(batch)
        groups.extend([g] * len(batch))
    size_of = {k: draw(st.sampled_from([0, 1, 2, 3, 5, 8, 40])) for k in set(keys)}
    n = len(keys)
    return Lookups(
        keys=keys,
        sizes=[size_of[k] for k in keys],
        weights=draw(st.lists(st.integers(1, 3), min_size=n, max_size=n)),
        work=draw(st.lists(st.integers(0, 5), min_size=n, max_size=n)),
        groups=groups,
        shared=[size_of[k] + 1 for k in keys] if shared else None,
        max_entries=draw(st.sampled_from([0, 0, 2, 3])),
        again=draw(st.booleans()),
    )


@pytest.mark.skipif(FAST is None, reason="the compiled kernel is not built")
@settings(max_examples=300, deadline=None)
@given(batched_lookups(one_pass_shape=False), st.integers(0, 60))
def test_compiled_replay_equals_python_on_every_traffic_shape(lk: Lookups, size: int) -> None:
    # multi-image batches, re-sent items anywhere in a batch, an item twice in a batch (either rule),
    # shared bytes, the entry bound, entries larger than the cache: the compiled replay is the Python one
    sizes = [size, size + 7, never_evicts(lk)]
    python = [replay_counts(lk, s, native=False) for s in sizes]
    assert [replay_counts(lk, s, native=True) for s in sizes] == python
    assert replay_many(lk, sizes, jobs=1, native=True) == [(h, w) for h, w, _ in python]


@pytest.mark.parametrize("native", [False, True] if FAST is not None else [False])
@settings(max_examples=200, deadline=None)
@given(lk=batched_lookups(one_pass_shape=True))
def test_one_pass_with_repeats_equals_the_replay_at_every_size(native: bool, lk: Lookups) -> None:
    # an item twice in a request (counted again where its first lookup hit, or looked up only where it
    # missed): one pass stays exact, every size equal to a replay
    exact = one_pass(lk)
    assert exact is not None
    curve = lru_curve(
        lk.keys,
        exact,
        lk.weights,
        lk.work,
        groups=lk.groups,
        max_entries=lk.max_entries,
        again=lk.again,
        native=native,
    )
    for size in range(never_evicts(lk) + 2):
        assert curve.at(size) == replay(lk, size), size


@pytest.mark.parametrize("native", [False, True] if FAST is not None else [False])
@settings(max_examples=300, deadline=None)
@given(lk=batched_lookups(one_pass_shape=False))
def test_one_pass_equals_the_replay_at_every_size_on_every_traffic_shape(native: bool, lk: Lookups) -> None:
    # multi-image batches re-sending any of their keys anywhere, an item twice in a batch (either rule),
    # the entry bound, entries larger than the cache: wherever one pass says it is exact (every batch
    # without shared bytes), each size of the curve is a replay at that size
    exact = one_pass(lk)
    assert exact is not None or lk.shared is not None
    if exact is None:
        return
    curve = lru_curve(
        lk.keys,
        exact,
        lk.weights,
        lk.work,
        groups=lk.groups,
        max_entries=lk.max_entries,
        again=lk.again,
        native=native,
    )
    for size in range(never_evicts(lk) + 2):
        assert curve.at(size) == replay(lk, size), size


def test_a_repeat_after_a_miss_is_a_lookup_and_after_a_hit_none() -> None:
    # batch 0 stores a; batch 1 is [a, b, a, b]: a hits (its repeat is not looked up where it hit),
    # b misses and its repeat is looked up and misses again (SGLang's per-image path)
    lk = Lookups(
        keys=[0, 0, 1, 0, 1], sizes=[1] * 5, weights=[1] * 5, work=[2] * 5, groups=[0, 1, 1, 1, 1], again=False
    )
    assert lk.repeats
    for native in [False, True] if FAST is not None else [False]:
        assert replay_counts(lk, 5, native=native) == (1, 2, 4)  # a, a, b, b looked up: the repeat of a not
        assert replay_counts(lk, 0, native=native) == (0, 0, 5)  # nothing held: every lookup made, all miss
    again = Lookups(keys=lk.keys, sizes=lk.sizes, weights=lk.weights, work=lk.work, groups=lk.groups)
    assert replay_counts(again, 5, native=False) == (2, 4, 5)  # the preprocess cache's rule: a hits twice
    exact = one_pass(lk)
    assert exact is not None
    for native in [False, True] if FAST is not None else [False]:  # the repeats count no hit in one pass either
        curve = lru_curve(lk.keys, exact, lk.weights, lk.work, groups=lk.groups, again=False, native=native)
        assert curve.at(5) == (1, 2)
        assert curve.at(0) == (0, 0)


@pytest.mark.skipif(FAST is None, reason="the compiled kernel is not built")
def test_compiled_replays_in_threads_give_the_points_in_order(monkeypatch: pytest.MonkeyPatch) -> None:
    from mmpool_cli.caches import replay as cache_replay

    lk = _batched(random.Random(8), 300, exact=False, shared=False)
    sizes = list(range(0, never_evicts(lk) + 5, 3))
    alone = [replay(lk, size) for size in sizes]
    monkeypatch.setattr(cache_replay, "NATIVE_THREADS_FROM", 0)
    assert replay_many(lk, sizes, jobs=3, native=True) == alone
    assert replay_many(lk, sizes, jobs=3, native=False) == [replay_counts(lk, s, native=False)[:2] for s in sizes]


@pytest.mark.skipif(FAST is None, reason="the compiled kernel is not built")
@pytest.mark.parametrize(
    ("keys", "sizes", "shared", "points"),
    [([0, 2], [1, 1], None, [4]), ([0, -1], [1, 1], None, [4]), ([0, 1], [1, -3], None, [4]), ([0], [1], [-1], [4])],
)
def test_compiled_replay_refuses_keys_and_sizes_out_of_range(
    keys: list[int], sizes: list[int], shared: list[int] | None, points: list[int]
) -> None:
    lk = Lookups(
        keys=keys,
        sizes=sizes,
        weights=[1] * len(keys),
        work=[0] * len(keys),
        groups=list(range(len(keys))),
        shared=shared,
    )
    with pytest.raises(ValueError, match="a key outside"):
        replay_counts(lk, points[0], native=True)
    with pytest.raises(ValueError, match="a point outside"):
        replay_counts(Lookups([0], [1], [1], [0], [0]), -1, native=True)
