"""An LRU counted in bytes replayed exactly at one size, in the order engines drive their caches.

Engines look up a batch's items (a request's, or one modality of it) before they store any: each
hit is moved to the most recent end as it is looked up, then the distinct misses are stored in the
order of their first lookup, each evicting from the least recently used end until it fits (an entry larger than the
whole cache is not admitted and evicts nothing; ``max_entries`` > 0 bounds the entries too). An
entry's bytes are its own, plus, where the batch's misses are cut from one tensor and each entry
keeps a view of it (``shared``), the shared bytes of every miss stored from that batch: then an
entry's size depends on which items missed, so on the cache's size.

``one_pass_sizes`` says when ``curve.lru_curve`` (one pass for every size) gives exactly
these hits: every entry's bytes fixed, and every batch used in one order at every size. Otherwise
each size is its own replay (``replay``), linear in the lookups. Neutral: knows no engine;
standard library only.
"""

from __future__ import annotations

from collections import Counter, OrderedDict
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from functools import cached_property

ONE_PASS = "one pass, exact"
REPLAYED = "replayed at each point"


@dataclass(frozen=True)
class Lookups:
    """A cache's lookups in the engine's order; adjacent lookups with one ``groups`` id are one batch."""

    keys: Sequence[int]  # dense ids; a key looked up twice in a batch misses twice, and is stored once
    sizes: Sequence[int]  # an entry's own bytes
    weights: Sequence[int]  # the hits a hit counts
    work: Sequence[int]  # what a hit saves, per weight
    groups: Sequence[int]
    shared: Sequence[int] | None = None  # bytes each stored miss adds to every entry stored from its batch
    max_entries: int = 0  # 0: no bound on the entries

    @cached_property
    def batches(self) -> list[tuple[int, int]]:
        """Each batch's lookups, ``[i, j)``, found once for every replay."""
        return list(_batches(self.groups))


def _batches(groups: Sequence[int]) -> Iterator[tuple[int, int]]:
    i, n = 0, len(groups)
    while i < n:
        j = i + 1
        while j < n and groups[j] == groups[i]:
            j += 1
        yield i, j
        i = j


def replay(lk: Lookups, size: int) -> tuple[int, int]:
    """``(hits, work saved)`` of a cache of ``size`` bytes over the lookups, batch by batch."""
    cache: OrderedDict[int, int] = OrderedDict()
    used = hits = work = 0
    cap = lk.max_entries
    keys, sizes, weights, saves, shared = lk.keys, lk.sizes, lk.weights, lk.work, lk.shared
    move, evict = cache.move_to_end, cache.popitem
    for i, j in lk.batches:
        missed: dict[int, int] = {}  # key -> its first lookup of the batch
        for k in range(i, j):
            key = keys[k]
            if key in cache:  # a key looked up twice is moved twice: its last lookup orders it
                move(key)
                hits += weights[k]
                work += weights[k] * saves[k]
            elif key not in missed:
                missed[key] = k
        if not missed:
            continue
        extra = 0 if shared is None else sum(shared[k] for k in missed.values())
        for key, k in missed.items():
            s = sizes[k] + extra
            if s > size or key in cache:
                continue
            while cache and (used + s > size or (cap and len(cache) >= cap)):
                used -= evict(last=False)[1]
            cache[key] = s
            used += s
    return hits, work


PARALLEL_FROM = 1 << 22  # lookups x points below which one process is quicker than forking workers
_SHARED: dict[str, Lookups] = {}  # the lookups the forked workers replay (inherited, never pickled)


def _replay_shared(size: int) -> tuple[int, int]:
    return replay(_SHARED["lookups"], size)


def replay_many(lk: Lookups, sizes: Sequence[int], jobs: int | None = None) -> list[tuple[int, int]]:
    """``replay`` at each of ``sizes``, in order: spread over forked workers, one a core, where it pays."""
    from mmpool_cli.core.workers import default_jobs

    slots = min(default_jobs() if jobs is None else jobs, len(sizes))
    import multiprocessing  # here: a small replay never needs it

    if slots <= 1 or len(lk.keys) * len(sizes) < PARALLEL_FROM or "fork" not in multiprocessing.get_all_start_methods():
        return [replay(lk, size) for size in sizes]
    from mmpool_cli.core.workers import worker_start

    _ = lk.batches  # found once, before the workers inherit it
    _SHARED["lookups"] = lk
    try:
        with multiprocessing.get_context("fork").Pool(slots, initializer=worker_start) as pool:
            return pool.map(_replay_shared, sizes, chunksize=1)
    finally:
        _SHARED.clear()


def never_evicts(lk: Lookups) -> int:
    """A size from which no entry is ever evicted for its bytes: every key at the most it can take."""
    most: dict[int, int] = {}
    for i, j in _batches(lk.groups):
        extra = 0 if lk.shared is None else sum(lk.shared[i:j])
        for k in range(i, j):
            most[lk.keys[k]] = max(most.get(lk.keys[k], 0), lk.sizes[k] + extra)
    return sum(most.values())


def one_pass_sizes(lk: Lookups) -> list[int] | None:
    """Each lookup's entry bytes where one pass is exact for these lookups, else None.

    One pass holds one order of use for all sizes, and one size per key. Both hold when, in every
    batch, at most one key was looked up before and it comes first (it is used first whether it
    hits or misses; the rest miss at every size, in the batch's order), and, where a batch shares
    bytes, a batch of several keys holds only keys looked up in no other batch (so every entry's
    bytes are the same at every size).
    """
    batches_of: Counter[int] = Counter()
    if lk.shared is not None:
        for i, j in _batches(lk.groups):
            batches_of.update(set(lk.keys[i:j]))
    seen: set[int] = set()
    out: list[int] = []
    for i, j in _batches(lk.groups):
        keys = lk.keys[i:j]
        if len(set(keys)) != j - i:
            return None
        if any(k in seen for k in keys[1:]):
            return None
        extra = 0
        if lk.shared is not None:
            if j - i > 1 and any(batches_of[k] > 1 for k in keys):
                return None
            extra = sum(lk.shared[i:j])
        out.extend(lk.sizes[k] + extra for k in range(i, j))
        seen.update(keys)
    return out


def first_setting(
    steps: Sequence[tuple[int, int, int]], need: int, setting_of: Callable[[int], int], size_of: Callable[[int], int]
) -> int | None:
    """The smallest setting whose size reaches ``need`` hits on an exact curve's steps (None: none does).

    ``setting_of(n)`` is the smallest setting of at least ``n`` bytes, ``size_of(m)`` a setting's bytes.
    """
    for at, (lo, hits, _) in enumerate(steps):
        hi = steps[at + 1][0] if at + 1 < len(steps) else None
        if hits >= need:
            m = setting_of(lo)
            if hi is None or size_of(m) < hi:
                return m
    return None


def bisect_setting(hits_at: Callable[[int], int], need: int, size_of: Callable[[int], int], top: int) -> int:
    """A setting that reaches ``need`` hits whose setting one below does not, by bisection over
    ``1 .. top`` (``top`` reaches it, a size of 0 does not): each probe one replay."""
    lo, hi = 0, top
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if hits_at(size_of(mid)) >= need:
            hi = mid
        else:
            lo = mid
    return hi
