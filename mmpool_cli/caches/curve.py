"""The hits of an LRU cache counted in bytes, at every size at once, from one pass over its lookups.

An LRU counted in bytes that evicts from its least recently used end until a new entry fits holds,
at every moment, the longest run of most recently used distinct entries whose bytes fit. So a
lookup of key ``x`` hits at size ``C`` exactly when the bytes of the distinct keys used since ``x``'s
previous lookup, ``x`` included, are at most ``C`` (Mattson et al., 1970): one byte-weighted stack
distance per lookup answers every size.

Two rules the engines' caches add are kept exactly:

* an entry larger than the whole cache is never admitted, and evicts nothing. At size ``C`` the cache
  is then a plain LRU over the lookups of keys of at most ``C`` bytes, so the keys larger than ``C``
  used in between do not count: ``x`` hits at ``C`` when ``s(x) + (bytes of the keys of at most C
  bytes used since) <= C``. The hits are no longer monotone in the size (a small key can hit in a
  cache too small for the large keys between its lookups, and miss in a larger one that admits
  them); for each lookup the sizes where it hits are a few intervals (at most about log2 of its
  distance: each begins where the keys counted so far are outweighed by the next larger one), found
  by walking a segment tree over the lookups' times that holds the sum, count, largest and smallest
  size of the keys last used there;
* a bound on the number of entries (``max_entries``): ``x`` also needs at most ``max_entries - 1``
  such keys in between;
* a batch (a request's items) looks all its keys up before it stores any, then holds its hits in
  the order of their lookups and its misses after them: an order of each size. The keys used after
  the batch count whole; the batch's own keys count where they follow ``x`` at that size, which
  their own hit intervals in the batch tell: the sizes split into pieces of one order each.

Lookups carry a weight (the hits they count) and a work figure (what a hit saves, e.g. encoder
tokens). The result is a step function: ``steps[i] = (size, hits, work)`` holds from ``size`` up to
the next step's size. Neutral: knows no engine; standard library only. ``_stackdist`` (C) is the
same algorithm compiled; ``tests/caches/test_curve.py`` keeps the two equal.
"""

from __future__ import annotations

from array import array
from collections.abc import Sequence
from dataclasses import dataclass
from types import ModuleType

from mmpool_cli.caches.sizeclass import INF, _Class, _cls, _Emit, _inside, _Later, _Placed, _walk
from mmpool_cli.kernels.native import compiled

__all__ = ["INF", "MAX_LOOKUPS", "Curve", "FAST", "lru_curve"]

MAX_LOOKUPS = 1 << 31  # what one pass takes (the compiled kernel indexes lookups with 32 bits)


@dataclass(frozen=True)
class Curve:
    """Hits (and work saved) against cache size: ``steps[i]`` holds from ``steps[i][0]`` to the next."""

    lookups: int  # the lookups' total weight
    steps: tuple[tuple[int, int, int], ...]  # (size_bytes, hits, work); the first at size 0

    def at(self, size: int) -> tuple[int, int]:
        """``(hits, work)`` of a cache of ``size`` bytes."""
        lo, hi = 0, len(self.steps)
        while hi - lo > 1:  # the last step whose size is <= size
            mid = (lo + hi) // 2
            if self.steps[mid][0] <= size:
                lo = mid
            else:
                hi = mid
        _, hits, work = self.steps[lo]
        return hits, work

    @property
    def unbounded(self) -> tuple[int, int]:
        """``(hits, work)`` of a cache that never evicts (its size the whole traffic's)."""
        _, hits, work = self.steps[-1]
        return hits, work

    def smallest_reaching(self, hits: int) -> int:
        """The smallest size with at least ``hits`` hits (0 when ``hits`` <= 0)."""
        for size, h, _ in self.steps:
            if h >= hits:
                return size
        return self.steps[-1][0] if hits <= self.steps[-1][1] else INF


FAST: ModuleType | None = compiled("_stackdist")


def lru_curve(
    keys: Sequence[int],
    sizes: Sequence[int],
    weights: Sequence[int] | None = None,
    work: Sequence[int] | None = None,
    *,
    groups: Sequence[int] | None = None,
    max_entries: int = 0,
    again: bool = True,
    in_order: bool = False,
    native: bool | None = None,
) -> Curve:
    """The exact hit curve of byte-counted LRU lookups: ``keys[i]`` (dense ids from 0) of ``sizes[i]`` bytes.

    ``weights`` (default 1) are the hits a lookup counts, ``work`` (default 0) what its hit saves;
    ``max_entries`` > 0 bounds the entries as well. ``native`` None: the compiled kernel where built.
    A key keeps the size of its first lookup (an entry's bytes do not change while it is cached).

    ``groups``: adjacent lookups with one group id are one batch, as engines look up a request's items
    before they store any: every lookup sees the cache as it was before the batch; then its hits are
    used in the order of their lookups (``again``: a repeat's lookup moves a hit again; else a key's
    first), then its misses stored in the order of their first lookup. Which keys hit depends on the
    size, so the batch leaves its keys in an order of each size: a later lookup of one of them counts
    the batch's keys that follow it there, size by size (exact for every order of lookups). A key
    looked up again in its batch hits where its first lookup does (``again``), or never (the engine
    looks it up again only where the first missed).
    ``in_order``: the batch's keys are used in lookup order instead (a key looked up twice at its last),
    whether they hit or miss, as a cache that pins the batch's entries found and then looks each up in
    turn leaves them (exact at every size where the batch's entries fit the cache together).
    """
    if groups is not None and len(groups) != len(keys):
        raise ValueError("groups must have one entry per lookup")
    n = len(keys)
    if len(sizes) != n or (weights is not None and len(weights) != n) or (work is not None and len(work) != n):
        raise ValueError("keys, sizes, weights and work must have one entry per lookup")
    if n > MAX_LOOKUPS:
        raise ValueError(f"{n:,} lookups: one pass takes at most {MAX_LOOKUPS:,}")
    use_native = FAST is not None if native is None else native
    if use_native:
        if FAST is None:
            raise RuntimeError("the compiled stack-distance kernel is not built")
        wq = _int64(weights) if weights is not None else array("q", [1]) * n
        steps = FAST.curve(
            _int64(keys),
            _int64(sizes),
            wq,
            _int64(work) if work is not None else array("q", bytes(8 * n)),
            b"" if groups is None else _int64(groups),
            max_entries,
            in_order,
            again,
        )
        return Curve(sum(wq), steps)
    w = list(weights) if weights is not None else [1] * n
    u = list(work) if work is not None else [0] * n
    return Curve(sum(w), _steps(_intervals(keys, sizes, w, u, max_entries, groups, again, in_order)))


def _int64(xs: Sequence[int]) -> array[int]:
    """``xs`` as the kernel reads it: an int64 array (one already is passed as it is, not copied)."""
    return xs if isinstance(xs, array) and xs.typecode == "q" else array("q", xs)


def _steps(events: dict[int, list[int]]) -> tuple[tuple[int, int, int], ...]:
    out: list[tuple[int, int, int]] = [(0, 0, 0)]
    hits = work = 0
    for size in sorted(events):
        if size >= INF:
            break
        dh, dw = events[size]
        hits += dh
        work += dw
        if out[-1][0] == size:
            out[-1] = (size, hits, work)
        elif (hits, work) != out[-1][1:]:
            out.append((size, hits, work))
    while len(out) > 1 and out[-1][1:] == out[-2][1:]:
        out.pop()
    return tuple(out)


def _intervals(
    keys: Sequence[int],
    sizes: Sequence[int],
    w: Sequence[int],
    u: Sequence[int],
    max_entries: int,
    groups: Sequence[int] | None = None,
    again: bool = True,
    in_order: bool = False,
) -> dict[int, list[int]]:
    """Each lookup's hit intervals of sizes, as +/- events of (hits, work) at their ends.

    The keys used since ``x``'s previous batch count whole (``_walk``). The other keys of that batch,
    still last used there, count where they follow ``x`` in the order the batch left at that size:
    its hits in the order of their lookups (``again``: a repeat's moves the key again), then its
    misses in the order of their first lookup. Which keys hit there is known (their intervals), so
    the sizes split into pieces where that order is one, each walked with the keys it puts after ``x``.
    """
    limit = max_entries if max_entries > 0 else INF
    events: dict[int, list[int]] = {}
    n = max(64, 2 * min(len(keys), 1 << 16))
    classes: dict[int, _Class] = {}
    where: dict[int, int] = {}  # key -> time of its last lookup
    batch_at: list[int] = [-1] * n  # time -> the batch that used it
    key_at: list[int] = [-1] * n
    placed: dict[int, _Placed] = {}
    size_of: dict[int, int] = {}
    pending: dict[int, tuple[int, int, list[tuple[int, int]]]] = {}  # key -> (first lookup, last, hit sizes)
    t = 0
    batch = 0

    def use() -> None:
        nonlocal t, n, classes, batch_at, key_at
        for key, (first, last, hits) in pending.items():  # in the order of their first lookup
            if t == n:  # out of times: renumber the live keys in order, and grow where they crowd it
                live = sorted(where.items(), key=lambda kv: kv[1])
                n = max(n, 4 * len(live))
                classes = {}
                new_batch, new_key = [-1] * n, [-1] * n
                for new, (k, old) in enumerate(live):
                    new_batch[new], new_key[new] = batch_at[old], k
                    where[k] = new
                    classes.setdefault(_cls(size_of[k]), _Class(n)).put(new, size_of[k], 1)
                batch_at, key_at = new_batch, new_key
                t = len(live)
            s = size_of[key]
            prev = where.get(key)
            if prev is not None:
                classes[_cls(s)].put(prev, s, -1)
            classes.setdefault(_cls(s), _Class(n)).put(t, s, 1)
            where[key] = t
            batch_at[t], key_at[t] = batch, key
            if in_order:  # one order at every size: the lookups'
                placed[key] = _Placed([], last, last)
            else:
                placed[key] = _Placed(hits, last if again else first, first)
            t += 1
        pending.clear()

    for i, key in enumerate(keys):
        if pending and (groups is None or groups[i] != groups[i - 1]):
            use()
            batch += 1
        s = size_of.setdefault(key, sizes[i])
        if key in pending:  # looked up again in its batch: it sees what its first lookup saw
            first, _, hits = pending[key]
            pending[key] = (first, i, hits)
            if not again:  # looked up only where the first lookup missed: it misses
                continue
            emit = _Emit(events, w[i], w[i] * u[i])
            for lo, hi in hits:
                emit.add(lo, hi)
            emit.flush()
            continue
        prev = where.get(key)
        emit = _Emit(events, w[i], w[i] * u[i])
        if prev is not None:
            g = batch_at[prev]
            end = prev + 1
            while end < t and batch_at[end] == g:
                end += 1
            start = prev
            while start > 0 and batch_at[start - 1] == g:
                start -= 1
            others = [key_at[p] for p in range(start, end) if p != prev and where.get(key_at[p]) == p]
            after = {j: c.after(end - 1) for j, c in classes.items()}
            later = _Later(classes, end, t)
            if not others:
                _walk(emit, s, after, later, limit)
            else:
                me = placed[key]
                cuts = sorted({c for k in (key, *others) for iv in placed[k].hits for c in iv if 0 < c < INF})
                for a, b in zip([0, *cuts], [*cuts, INF], strict=True):
                    hit = _inside(a, me.hits)
                    behind: list[int] = []  # the batch's keys after this one at the sizes a .. b - 1
                    for k in others:
                        pk = placed[k]
                        k_hit = _inside(a, pk.hits)
                        if (hit and (not k_hit or pk.hit_at > me.hit_at)) or (
                            not hit and not k_hit and pk.miss_at > me.miss_at
                        ):
                            behind.append(k)
                    sums = dict(after)
                    for k in behind:
                        j = _cls(size_of[k])
                        sj, kj = sums.get(j, (0, 0))
                        sums[j] = (sj + size_of[k], kj + 1)

                    def least(j: int, behind: list[int] = behind, later: _Later = later) -> tuple[int, int]:
                        m1, m2 = later(j)
                        for k in behind:
                            if _cls(size_of[k]) == j:
                                z = size_of[k]
                                m1, m2 = (z, m1) if z < m1 else (m1, min(m2, z))
                        return m1, m2

                    _walk(emit, s, sums, least, limit, a, b)
        emit.flush()
        pending[key] = (i, i, emit.got)
    use()
    return events
