"""The one-pass curve against a byte-counted LRU replayed at each size, and the compiled kernel against the Python one."""

from __future__ import annotations

import random
from array import array
from collections import OrderedDict

import pytest

from mmpool_cli.caches import curve as cache_curve
from mmpool_cli.caches.curve import lru_curve


def replay(keys: list[int], sizes: list[int], weights: list[int], size: int, max_entries: int = 0) -> int:
    """An LRU counted in bytes at one size: refuses an entry larger than itself, evicts from the old end."""
    cache: OrderedDict[int, int] = OrderedDict()
    used = hits = 0
    first: dict[int, int] = {}
    for key, s0, w in zip(keys, sizes, weights, strict=True):
        s = first.setdefault(key, s0)
        if key in cache:
            cache.move_to_end(key)
            hits += w
            continue
        if s > size:
            continue
        while cache and (used + s > size or (max_entries and len(cache) >= max_entries)):
            _, old = cache.popitem(last=False)
            used -= old
        cache[key] = s
        used += s
    return hits


def trace(seed: int, n: int, distinct: int, big: bool) -> tuple[list[int], list[int], list[int]]:
    rng = random.Random(seed)
    sizes_of = [
        rng.choice([rng.randint(1, 40), rng.randint(1, 400) if big else rng.randint(1, 40)]) for _ in range(distinct)
    ]
    keys = [min(int(rng.expovariate(0.15)), distinct - 1) for _ in range(n)]
    return keys, [sizes_of[k] for k in keys], [rng.randint(1, 3) for _ in keys]


@pytest.mark.parametrize("native", [False, True] if cache_curve.FAST is not None else [False])
@pytest.mark.parametrize("seed", range(12))
def test_curve_equals_replay_at_every_size(seed: int, native: bool) -> None:
    keys, sizes, weights = trace(seed, 300, 25, big=seed % 2 == 0)
    limit = 6 if seed % 3 == 0 else 0
    curve = lru_curve(keys, sizes, weights, [s * 2 for s in sizes], max_entries=limit, native=native)
    total = sum(dict(zip(keys, sizes, strict=True)).values())
    assert curve.lookups == sum(weights)
    for size in range(total + 2):
        hits = replay(keys, sizes, weights, size, limit)
        assert curve.at(size)[0] == hits, size
        assert curve.at(size)[1] == replay(
            keys, sizes, [w * s * 2 for w, s in zip(weights, sizes, strict=True)], size, limit
        )


def test_oversize_entries_make_hits_non_monotone() -> None:
    # x (1 byte), y (10 bytes, refused below 10), x: x hits at 1..9 (y refused), misses at 10, hits from 11
    curve = lru_curve([0, 1, 0], [1, 10, 1])
    assert [curve.at(c)[0] for c in (0, 1, 9, 10, 11, 1000)] == [0, 1, 1, 0, 1, 1]


@pytest.mark.skipif(cache_curve.FAST is None, reason="the compiled kernel is not built")
@pytest.mark.parametrize("seed", range(6))
def test_compiled_kernel_equals_python(seed: int) -> None:
    rng = random.Random(seed)
    n = 3000
    keys = [rng.randrange(400) for _ in range(n)]
    sizes_of = [rng.randint(1, 1 << rng.randint(1, 30)) for _ in range(400)]
    sizes = [sizes_of[k] for k in keys]
    weights = [rng.randint(1, 4) for _ in range(n)]
    work = [rng.randint(0, 9) for _ in range(n)]
    limit = rng.choice([0, 50])
    a = lru_curve(keys, sizes, weights, work, max_entries=limit, native=False)
    b = lru_curve(keys, sizes, weights, work, max_entries=limit, native=True)
    assert a == b


def test_empty_and_smallest_reaching() -> None:
    assert lru_curve([], []).steps == ((0, 0, 0),)
    curve = lru_curve([0, 0, 1, 1], [5, 5, 7, 7])
    assert curve.unbounded == (2, 0)
    assert curve.smallest_reaching(1) == 5
    assert curve.smallest_reaching(2) == 7


@pytest.mark.skipif(cache_curve.FAST is None, reason="the compiled kernel is not built")
@pytest.mark.parametrize("seed", range(4))
def test_compiled_kernel_equals_python_with_batches(seed: int) -> None:
    rng = random.Random(100 + seed)
    n = 2000
    keys = [rng.randrange(150) for _ in range(n)]
    sizes_of = [rng.randint(1, 1 << rng.randint(1, 20)) for _ in range(150)]
    groups, g = [], 0
    for _ in range(n):
        g += rng.random() < 0.4
        groups.append(g)
    sizes = [sizes_of[k] for k in keys]
    a = lru_curve(keys, sizes, groups=groups, native=False)
    b = lru_curve(keys, sizes, groups=groups, native=True)
    assert a == b


def test_batch_lookups_see_the_cache_before_the_batch() -> None:
    # a (4 B) then, in one batch, b (4 B) and a: at 4 B a still hits (b is stored after the lookups)
    batched = lru_curve([0, 1, 0], [4, 4, 4], groups=[0, 1, 1])
    alone = lru_curve([0, 1, 0], [4, 4, 4])
    assert batched.at(4)[0] == 1
    assert alone.at(4)[0] == 0


def spread(seed: int, n: int, distinct: int) -> tuple[list[int], list[int]]:
    """Lookups that reuse keys from a few lookups back up to the whole key space, with empty entries."""
    rng = random.Random(seed)
    sizes_of = [rng.choice([0, rng.randint(1, 1 << rng.randint(1, 24))]) for _ in range(distinct)]
    keys: list[int] = []
    for i in range(n):
        if i and rng.random() < 0.5:
            keys.append(keys[max(0, i - 1 - int(rng.expovariate(rng.choice([0.5, 0.02, 0.001]))))])
        else:
            keys.append(rng.randrange(distinct))
    return keys, [sizes_of[k] for k in keys]


@pytest.mark.skipif(cache_curve.FAST is None, reason="the compiled kernel is not built")
@pytest.mark.parametrize(
    ("seed", "limit", "batched", "in_order"),
    [(0, 0, False, False), (1, 300, False, False), (2, 0, True, False), (3, 40, True, False), (4, 0, True, True)],
)
def test_compiled_kernel_equals_python_across_blocks(seed: int, limit: int, batched: bool, in_order: bool) -> None:
    # the kernel keeps the live keys in blocks of times and renumbers them as they run out: reuses at
    # every distance (inside a block, across blocks, over renumberings), empty entries, both bounds
    rng = random.Random(seed)
    keys, sizes = spread(seed, 12_000, 1500)
    weights = [rng.randint(1, 3) for _ in keys]
    work = [rng.randint(0, 5) for _ in keys]
    groups = None
    if batched:
        groups, g = [], 0
        for _ in keys:
            g += rng.random() < 0.5
            groups.append(g)
    a = lru_curve(keys, sizes, weights, work, groups=groups, max_entries=limit, in_order=in_order, native=False)
    b = lru_curve(keys, sizes, weights, work, groups=groups, max_entries=limit, in_order=in_order, native=True)
    assert a == b
    assert len(a.steps) > 100


@pytest.mark.parametrize("native", [False, True] if cache_curve.FAST is not None else [False])
def test_empty_entries_equal_replay(native: bool) -> None:
    keys, sizes = spread(7, 400, 30)
    sizes = [s % 50 for s in sizes]
    ones = [1] * len(keys)
    for limit in (0, 5):
        curve = lru_curve(keys, sizes, ones, max_entries=limit, native=native)
        for size in range(sum(dict(zip(keys, sizes, strict=True)).values()) + 2):
            assert curve.at(size)[0] == replay(keys, sizes, ones, size, limit), (limit, size)


@pytest.mark.skipif(cache_curve.FAST is None, reason="the compiled kernel is not built")
def test_int64_arrays_read_as_lists() -> None:
    keys, sizes = spread(9, 2000, 200)
    weights = [1 + k % 3 for k in keys]
    as_lists = lru_curve(keys, sizes, weights, sizes, groups=[i // 3 for i in range(len(keys))], native=True)
    as_arrays = lru_curve(
        array("q", keys),
        array("q", sizes),
        array("q", weights),
        array("q", sizes),
        groups=array("q", [i // 3 for i in range(len(keys))]),
        native=True,
    )
    assert as_arrays == as_lists


@pytest.mark.skipif(cache_curve.FAST is None, reason="the compiled kernel is not built")
@pytest.mark.parametrize(("keys", "sizes"), [([0, 2], [1, 1]), ([0, -1], [1, 1]), ([0, 1], [1, -3]), ([0], [1 << 62])])
def test_kernel_refuses_keys_and_sizes_out_of_range(keys: list[int], sizes: list[int]) -> None:
    with pytest.raises(ValueError, match="a key outside"):
        lru_curve(keys, sizes, native=True)
