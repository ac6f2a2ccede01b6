"""The exact per-size replay of a byte-counted LRU, and when one pass gives the same hits at every size."""

from __future__ import annotations

import random

import pytest

from mmpool_cli.caches.curve import FAST, lru_curve
from mmpool_cli.caches.replay import (
    Lookups,
    bisect_setting,
    first_setting,
    never_evicts,
    one_pass_sizes,
    replay,
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
    sizes = one_pass_sizes(lk)
    assert sizes is not None
    curve = lru_curve(lk.keys, sizes, lk.weights, lk.work, max_entries=lk.max_entries)
    for size in range(never_evicts(lk) + 2):
        assert curve.at(size) == replay(lk, size), size


@pytest.mark.parametrize("native", [False, True] if FAST is not None else [False])
def test_one_pass_is_refused_where_a_batch_reorders(native: bool) -> None:
    # batch 1 is a new key then a re-used one: at 4 B the re-used one misses and is stored last (so it
    # hits in batch 2), where it hits it is used first; no single order holds both
    lk = Lookups(keys=[2, 3, 0, 2, 2], sizes=[3, 3, 2, 3, 3], weights=[1] * 5, work=[0] * 5, groups=[0, 0, 1, 1, 2])
    assert one_pass_sizes(lk) is None
    assert replay(lk, 4) == (1, 0)
    wrong = lru_curve(lk.keys, lk.sizes, lk.weights, lk.work, groups=lk.groups, native=native)
    assert wrong.at(4) != replay(lk, 4)


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
    assert one_pass_sizes(lk) is None
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
