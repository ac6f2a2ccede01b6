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
  such keys in between.

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

from mmpool_cli.kernels.native import compiled

INF = 1 << 62  # "no end": larger than any cache size
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
    in_order: bool = False,
    native: bool | None = None,
) -> Curve:
    """The exact hit curve of byte-counted LRU lookups: ``keys[i]`` (dense ids from 0) of ``sizes[i]`` bytes.

    ``weights`` (default 1) are the hits a lookup counts, ``work`` (default 0) what its hit saves;
    ``max_entries`` > 0 bounds the entries as well. ``native`` None: the compiled kernel where built.
    A key keeps the size of its first lookup (an entry's bytes do not change while it is cached).

    ``groups``: adjacent lookups with one group id are one batch, as engines look up a request's items
    before they store any (every lookup sees the cache as it was before the batch); the batch's keys
    are then used hits first and misses after (SGLang's order), taken as the order of the smallest
    size each hits at. That order is exact at every size where the batch's hits come before its
    misses in the batch (its re-sent items first, its new ones last); elsewhere it is the nearest one
    stack can hold (docs/caches.md says where the curve is exact). ``in_order``: the batch's keys are
    used in lookup order instead, as a cache that pins the batch's entries found and then looks each up
    in turn leaves them (exact at every size where the batch's entries fit the cache together).
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
        )
        return Curve(sum(wq), steps)
    w = list(weights) if weights is not None else [1] * n
    u = list(work) if work is not None else [0] * n
    return Curve(sum(w), _steps(_intervals(keys, sizes, w, u, max_entries, groups, in_order)))


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


def _cls(size: int) -> int:
    return size.bit_length()  # class j holds sizes in [2**(j-1), 2**j); class 0 the empty ones


class _Class:
    """The keys of one size class, by the time of their last lookup: a Fenwick tree of their bytes
    and count (a suffix is the class's total less a prefix) and a segment tree of their smallest size."""

    def __init__(self, n: int) -> None:
        self.n = n
        self.sm = [0] * (n + 1)
        self.cn = [0] * (n + 1)
        self.total = self.count = 0
        self.mn = [INF] * (2 * n)

    def put(self, pos: int, size: int, sign: int) -> None:
        self.total += sign * size
        self.count += sign
        i = pos + 1
        while i <= self.n:
            self.sm[i] += sign * size
            self.cn[i] += sign
            i += i & -i
        i = pos + self.n
        self.mn[i] = size if sign > 0 else INF
        i //= 2
        while i:
            self.mn[i] = min(self.mn[2 * i], self.mn[2 * i + 1])
            i //= 2

    def after(self, pos: int) -> tuple[int, int]:
        """Bytes and count of the keys last used after ``pos``."""
        s = c = 0
        i = pos + 1
        while i:
            s += self.sm[i]
            c += self.cn[i]
            i -= i & -i
        return self.total - s, self.count - c

    def least(self, lo: int, hi: int) -> tuple[int, int]:
        """The smallest size in ``lo .. hi - 1`` and its position (INF, -1 where there is none)."""
        best, node = INF, 0
        a, b = lo + self.n, hi + self.n
        while a < b:
            if a & 1:
                if self.mn[a] < best:
                    best, node = self.mn[a], a
                a += 1
            if b & 1:
                b -= 1
                if self.mn[b] < best:
                    best, node = self.mn[b], b
            a //= 2
            b //= 2
        if best == INF:
            return INF, -1
        while node < self.n:
            node = 2 * node if self.mn[2 * node] == best else 2 * node + 1
        return best, node - self.n

    def two_least(self, lo: int, hi: int) -> tuple[int, int]:
        m1, pos = self.least(lo, hi)
        if pos < 0:
            return INF, INF
        return m1, min(self.least(lo, pos)[0], self.least(pos + 1, hi)[0])


class _Emit:
    """Hit intervals of one lookup into the events, adjacent ones joined."""

    def __init__(self, events: dict[int, list[int]], dh: int, dw: int) -> None:
        self.events, self.dh, self.dw = events, dh, dw
        self.lo = self.hi = -1
        self.first = INF  # the smallest size it hits at

    def add(self, lo: int, hi: int) -> None:
        if lo >= hi:
            return
        self.first = min(self.first, lo)
        if lo == self.hi:
            self.hi = hi
            return
        self.flush()
        self.lo, self.hi = lo, hi

    def flush(self) -> None:
        if self.lo < 0:
            return
        for at, sign in ((self.lo, 1), (self.hi, -1)):
            if at < INF:
                e = self.events.setdefault(at, [0, 0])
                e[0] += sign * self.dh
                e[1] += sign * self.dw
        self.lo = self.hi = -1


def _intervals(
    keys: Sequence[int],
    sizes: Sequence[int],
    w: Sequence[int],
    u: Sequence[int],
    max_entries: int,
    groups: Sequence[int] | None = None,
    in_order: bool = False,
) -> dict[int, list[int]]:
    """Each lookup's hit intervals of sizes, as +/- events of (hits, work) at their ends.

    Between two lookups of ``x``, at a size ``C`` in class ``j``'s range ``[2**(j-1), 2**j)`` every key
    of a smaller class counts, none of a larger one, and at most one of class ``j`` (two would
    outweigh ``C``): so the class sums and the two smallest sizes of each class settle every size.
    The lookups of one group (``groups[i]`` equal and adjacent) all see the cache as it was before
    the group; then its keys are used, those that hit at smaller sizes first (see ``lru_curve``).
    """
    limit = max_entries if max_entries > 0 else INF
    events: dict[int, list[int]] = {}
    n = max(64, 2 * min(len(keys), 1 << 16))
    classes: dict[int, _Class] = {}
    where: dict[int, int] = {}  # key -> time of its last lookup
    size_of: dict[int, int] = {}
    pending: list[tuple[int, int, int, int]] = []  # (first size it hits at, lookup, key, size)
    t = 0

    def use() -> None:
        nonlocal t, n, classes
        for _, _, key, s in pending if in_order else sorted(pending):
            if t == n:  # out of times: renumber the live keys in order, and grow where they crowd it
                live = sorted(where.items(), key=lambda kv: kv[1])
                n = max(n, 4 * len(live))
                classes = {}
                for new, (k, _) in enumerate(live):
                    where[k] = new
                    classes.setdefault(_cls(size_of[k]), _Class(n)).put(new, size_of[k], 1)
                t = len(live)
            prev = where.get(key)
            if prev is not None:
                classes[_cls(s)].put(prev, s, -1)
            classes.setdefault(_cls(s), _Class(n)).put(t, s, 1)
            where[key] = t
            t += 1
        pending.clear()

    for i, key in enumerate(keys):
        if pending and (groups is None or groups[i] != groups[i - 1]):
            use()
        s = size_of.setdefault(key, sizes[i])
        prev = where.get(key)
        cx = _cls(s)
        first = INF
        if prev is not None:
            emit = _Emit(events, w[i], w[i] * u[i])
            after = {j: c.after(prev) for j, c in classes.items()}
            top = max((j for j, (_, k) in after.items() if k), default=-1)
            base, used = s, 1  # bytes and entries counted at the sizes of the class being walked
            for j in range(min(cx, top + 1)):
                sj, kj = after.get(j, (0, 0))
                base, used = base + sj, used + kj
            for j in range(cx, top + 1):
                sj, kj = after.get(j, (0, 0))
                lo, hi = max(s, (1 << j) >> 1), 1 << j
                if j == 0:  # empty entries: all of them count
                    if used + kj <= limit:
                        emit.add(lo, hi)
                elif kj == 0:
                    if used <= limit:
                        emit.add(max(lo, base), hi)
                elif base < hi:
                    m1, m2 = classes[j].two_least(prev + 1, t)
                    if used <= limit:
                        emit.add(max(lo, base), min(m1, hi))
                    if used + 1 <= limit:
                        emit.add(max(m1, base + m1), min(m2, hi))
                base, used = base + sj, used + kj
            if used <= limit:
                emit.add(max(base, (1 << top) if top >= cx else 0), INF)
            emit.flush()
            first = emit.first
        pending.append((first, i, key, s))
    use()
    return events
