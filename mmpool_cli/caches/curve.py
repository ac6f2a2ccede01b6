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
from collections.abc import Callable, Sequence
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
    """Hit intervals of one lookup into the events, adjacent ones joined; ``got`` keeps them."""

    def __init__(self, events: dict[int, list[int]], dh: int, dw: int) -> None:
        self.events, self.dh, self.dw = events, dh, dw
        self.lo = self.hi = -1
        self.got: list[tuple[int, int]] = []

    def add(self, lo: int, hi: int) -> None:
        if lo >= hi:
            return
        if lo == self.hi:
            self.hi = hi
            return
        self.flush()
        self.lo, self.hi = lo, hi

    def flush(self) -> None:
        if self.lo < 0:
            return
        self.got.append((self.lo, self.hi))
        for at, sign in ((self.lo, 1), (self.hi, -1)):
            if at < INF:
                e = self.events.setdefault(at, [0, 0])
                e[0] += sign * self.dh
                e[1] += sign * self.dw
        self.lo = self.hi = -1


def _inside(size: int, hits: Sequence[tuple[int, int]]) -> bool:
    return any(lo <= size < hi for lo, hi in hits)


def _walk(
    emit: _Emit,
    s: int,
    after: dict[int, tuple[int, int]],
    least: Callable[[int], tuple[int, int]],
    limit: int,
    a: int = 0,
    b: int = INF,
) -> None:
    """The sizes in ``[a, b)`` where a key of ``s`` bytes hits, given the bytes and count of each size
    class used since (``after``) and the two smallest sizes of a class (``least``).

    At a size ``C`` in class ``j``'s range ``[2**(j-1), 2**j)`` every key of a smaller class counts,
    none of a larger one, and at most one of class ``j`` (two would outweigh ``C``)."""

    def add(lo: int, hi: int) -> None:
        emit.add(max(lo, a), min(hi, b))

    cx = _cls(s)
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
                add(lo, hi)
        elif kj == 0:
            if used <= limit:
                add(max(lo, base), hi)
        elif base < hi and hi > a and lo < b:
            m1, m2 = least(j)
            if used <= limit:
                add(max(lo, base), min(m1, hi))
            if used + 1 <= limit:
                add(max(m1, base + m1), min(m2, hi))
        base, used = base + sj, used + kj
    if used <= limit:
        add(max(base, (1 << top) if top >= cx else 0), INF)


class _Later:
    """The two smallest sizes of each class among the keys last used in ``lo .. hi - 1``, found once."""

    def __init__(self, classes: dict[int, _Class], lo: int, hi: int) -> None:
        self.classes, self.lo, self.hi = classes, lo, hi
        self.memo: dict[int, tuple[int, int]] = {}

    def __call__(self, j: int) -> tuple[int, int]:
        if j not in self.memo:
            self.memo[j] = self.classes[j].two_least(self.lo, self.hi) if j in self.classes else (INF, INF)
        return self.memo[j]


@dataclass
class _Placed:
    """A key as its last batch left it: whether and where in the batch's order it went, at each size."""

    hits: list[tuple[int, int]]  # the sizes where its lookup in that batch hit
    hit_at: int  # its place among the batch's hits (the lookup that moved it last)
    miss_at: int  # its place among the batch's misses (its first lookup)


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
