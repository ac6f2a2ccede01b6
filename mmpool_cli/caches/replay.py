"""An LRU counted in bytes replayed exactly at one size, in the order engines drive their caches.

Engines look up a batch's items (a request's, or one modality of it) before they store any: each
hit is moved to the most recent end as it is looked up, then the distinct misses are stored in the
order of their first lookup, each evicting from the least recently used end until it fits (an entry larger than the
whole cache is not admitted and evicts nothing; ``max_entries`` > 0 bounds the entries too). An
entry's bytes are its own, plus, where the batch's misses are cut from one tensor and each entry
keeps a view of it (``shared``), the shared bytes of every miss stored from that batch: then an
entry's size depends on which items missed, so on the cache's size.

A key looked up twice in a batch is looked up again (``again``: where its first lookup hit, the
repeat hits and moves it again; SGLang's preprocess cache) or only where its first lookup missed
(SGLang's embedding cache: the repeat then misses, and where the first hit it is no lookup at all).

``one_pass`` says when ``curve.lru_curve`` (one pass for every size) gives exactly these hits:
every entry's bytes fixed, and every batch used in one order at every size. Otherwise each size is
its own replay (``replay``), linear in the lookups, compiled in ``_stackdist.replay`` where it was
built (the Python code is the reference; ``tests/caches/test_replay.py`` keeps the two equal).
Neutral: knows no engine; standard library only.
"""

from __future__ import annotations

from array import array
from collections import Counter, OrderedDict
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from functools import cached_property
from itertools import groupby

from mmpool_cli.caches.curve import FAST, Curve

ONE_PASS = "one pass, exact"
ONE_PASS_BATCH = 32  # distinct keys a batch may hold for one pass (more: replayed at each point)
REPLAYED = "replayed at each point"


@dataclass(frozen=True)
class Lookups:
    """A cache's lookups in the engine's order; adjacent lookups with one ``groups`` id are one batch."""

    keys: Sequence[int]  # dense ids; a key looked up twice in a batch is stored once
    sizes: Sequence[int]  # an entry's own bytes
    weights: Sequence[int]  # the hits a hit counts
    work: Sequence[int]  # what a hit saves, per weight
    groups: Sequence[int]
    shared: Sequence[int] | None = None  # bytes each stored miss adds to every entry stored from its batch
    max_entries: int = 0  # 0: no bound on the entries
    # a repeat in a batch is looked up again (True), or only where the batch's first lookup of it missed
    again: bool = True

    @cached_property
    def batches(self) -> list[tuple[int, int]]:
        """Each batch's lookups, ``[i, j)``, found once for every replay."""
        return list(_batches(self.groups))

    @cached_property
    def repeats(self) -> bool:
        """Whether a batch looks a key up twice."""
        return any(len(set(self.keys[i:j])) != j - i for i, j in self.batches)

    @cached_property
    def columns(self) -> tuple[array[int], ...]:
        """The lookups as the compiled replay reads them (int64 arrays), made once for every replay."""
        empty = array("q")
        return (
            *(_int64(xs) for xs in (self.keys, self.sizes, self.weights, self.work, self.groups)),
            empty if self.shared is None else _int64(self.shared),
        )


def _int64(xs: Sequence[int]) -> array[int]:
    return xs if isinstance(xs, array) and xs.typecode == "q" else array("q", xs)


def _batches(groups: Sequence[int]) -> Iterator[tuple[int, int]]:
    i = 0
    for _, run in groupby(groups):
        j = i + len(list(run))
        yield i, j
        i = j


def replay(lk: Lookups, size: int) -> tuple[int, int]:
    """``(hits, work saved)`` of a cache of ``size`` bytes over the lookups, batch by batch."""
    hits, work, _ = replay_counts(lk, size)
    return hits, work


def replay_counts(lk: Lookups, size: int, native: bool | None = None) -> tuple[int, int, int]:
    """``(hits, work saved, lookups made)`` at ``size`` bytes: the lookups' weight, less the repeats a
    batch does not look up where its first lookup hit. ``native`` None: the compiled replay where built."""
    if native is None:
        native = FAST is not None
    if native:
        if FAST is None:
            raise RuntimeError("the compiled cache replay is not built")
        return _native(lk, [size])[0]
    return _replay(lk, size)


def _native(lk: Lookups, sizes: Sequence[int]) -> list[tuple[int, int, int]]:
    assert FAST is not None
    keys, nbytes, weights, work, groups, shared = lk.columns
    got = FAST.replay(keys, nbytes, weights, work, groups, shared, lk.max_entries, lk.again, _int64(sizes))
    return list(got)


def _replay(lk: Lookups, size: int) -> tuple[int, int, int]:
    cache: OrderedDict[int, int] = OrderedDict()
    used = hits = work = made = 0
    cap, again = lk.max_entries, lk.again
    keys, sizes, weights, saves, shared = lk.keys, lk.sizes, lk.weights, lk.work, lk.shared
    move, evict = cache.move_to_end, cache.popitem
    for i, j in lk.batches:
        missed: dict[int, int] = {}  # key -> its first lookup of the batch
        looked: set[int] = set()
        for k in range(i, j):
            key = keys[k]
            first = key not in looked
            looked.add(key)
            if key in cache:  # a key looked up twice is moved twice: its last lookup orders it
                if not (first or again):
                    continue  # its first lookup hit: the engine does not look it up again
                move(key)
                made += weights[k]
                hits += weights[k]
                work += weights[k] * saves[k]
            else:
                made += weights[k]
                if first:
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
    return hits, work, made


PARALLEL_FROM = 1 << 22  # lookups x points below which one process is quicker than forking workers
_SHARED: dict[str, Lookups] = {}  # the lookups the forked workers replay (inherited, never pickled)


def _replay_shared(size: int) -> tuple[int, int]:
    return replay(_SHARED["lookups"], size)


NATIVE_THREADS_FROM = 1 << 20  # lookups x points below which one thread is quicker than several


def replay_many(
    lk: Lookups, sizes: Sequence[int], jobs: int | None = None, native: bool | None = None
) -> list[tuple[int, int]]:
    """``replay`` at each of ``sizes``, in order, spread over the cores where it pays: the compiled replay
    in threads (it releases the GIL), the Python one in forked workers."""
    from mmpool_cli.core.workers import default_jobs

    slots = min(default_jobs() if jobs is None else jobs, len(sizes))
    if native is None:
        native = FAST is not None
    if native:
        return [(h, w) for h, w, _ in _native_many(lk, sizes, slots)]
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


def _native_many(lk: Lookups, sizes: Sequence[int], slots: int) -> list[tuple[int, int, int]]:
    if slots <= 1 or len(lk.keys) * len(sizes) < NATIVE_THREADS_FROM:
        return _native(lk, sizes)
    from concurrent.futures import ThreadPoolExecutor

    _ = lk.columns  # made once, before the threads share it
    shares = [list(sizes[s::slots]) for s in range(slots)]  # interleaved: the points cost about the same
    with ThreadPoolExecutor(slots) as pool:
        parts = list(pool.map(lambda share: _native(lk, share), shares))
    out: list[tuple[int, int, int]] = [(0, 0, 0)] * len(sizes)
    for s, part in enumerate(parts):
        out[s::slots] = part
    return out


def never_evicts(lk: Lookups) -> int:
    """A size from which no entry is ever evicted for its bytes: every key at the most it can take."""
    most: dict[int, int] = {}
    if lk.shared is None:  # each entry its own bytes: the most each key takes, in one walk
        get = most.get
        for key, size in zip(lk.keys, lk.sizes, strict=True):
            if size > get(key, 0):
                most[key] = size
        return sum(most.values())
    for i, j in _batches(lk.groups):
        extra = 0 if lk.shared is None else sum(lk.shared[i:j])
        for k in range(i, j):
            most[lk.keys[k]] = max(most.get(lk.keys[k], 0), lk.sizes[k] + extra)
    return sum(most.values())


def one_pass(lk: Lookups) -> Sequence[int] | None:
    """Each lookup's entry bytes for ``curve.lru_curve`` where one pass is exact for these lookups,
    else None.

    One pass follows each batch's order at every size (its hits in the order of their lookups, then
    its misses in the order of their first), so it is exact for every order of lookups; it needs one
    size per key. Where a batch shares bytes, an entry's bytes depend on which keys missed with it:
    one size holds only where a batch of several distinct keys holds keys looked up in no other batch.
    A batch of more than ``ONE_PASS_BATCH`` distinct keys is replayed instead (each later lookup of
    one of them walks the batch's order piece by piece: quadratic in the batch).
    """
    widest = max((j - i for i, j in lk.batches), default=0)
    if lk.shared is None and widest <= ONE_PASS_BATCH:
        return lk.sizes  # the common case, taken quickly
    batches_of: Counter[int] = Counter()
    if lk.shared is not None:
        for i, j in lk.batches:
            batches_of.update(set(lk.keys[i:j]))
    sizes: list[int] = []
    for i, j in lk.batches:
        by_key: dict[int, int] = {}  # key -> the batch's first lookup of it, in order
        for k in range(i, j):
            by_key.setdefault(lk.keys[k], k)
        if len(by_key) > ONE_PASS_BATCH:
            return None
        extra = 0
        if lk.shared is not None:
            if len(by_key) > 1 and any(batches_of[key] > 1 for key in by_key):
                return None
            extra = sum(lk.shared[k] for k in by_key.values())
        sizes.extend(lk.sizes[k] + extra for k in range(i, j))
    return sizes


def replayed_curve(
    lk: Lookups,
    size: int,
    points: int,
    need: Callable[[Curve], int],
    size_of: Callable[[int], int],
    setting_of: Callable[[int], int],
) -> tuple[Curve, int | None]:
    """The curve where one pass is not exact, each point its own replay: ``points + 1`` sizes evenly
    from 0 to the size that never evicts, the deployment's ``size`` and the recommendation's; and the
    recommended setting (None where nothing hits), found by bisection over the settings for the
    ``need(curve)`` hits. ``size_of(m)`` is a setting's bytes, ``setting_of(n)`` the smallest setting of
    at least ``n`` bytes."""
    top = never_evicts(lk)
    at = {top * k // points for k in range(points + 1)} | ({size} if size < top else set())
    curve = _points(lk, at)
    hits = need(curve)
    mb = bisect_setting(lambda n: replay(lk, n)[0], hits, size_of, setting_of(top)) if hits > 0 else None
    if mb is not None and size_of(mb) < top and size_of(mb) not in at:  # its own replay, shown with the rest
        extra = size_of(mb)
        curve = Curve(curve.lookups, tuple(sorted((*curve.steps, (extra, *replay(lk, extra))))))
    return curve, mb


def _points(lk: Lookups, points: set[int]) -> Curve:
    """The curve at ``points`` only, each an exact replay."""
    sizes = sorted(points)
    return Curve(sum(lk.weights), tuple((p, *got) for p, got in zip(sizes, replay_many(lk, sizes), strict=True)))


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
