"""The pieces of the one-pass curve (``curve.py``): the live keys of one size class by the time of their
last lookup, a lookup's hit intervals, and the walk over the size classes that finds them.

Between two lookups of a key of ``s`` bytes, at a size ``C`` in class ``j``'s range ``[2**(j-1), 2**j)``
every key of a smaller class counts, none of a larger one, and at most one of class ``j`` (two would
outweigh ``C``): so the classes' sums and the two smallest sizes of each class settle every size.
Neutral: knows no engine; standard library only.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

INF = 1 << 62  # "no end": larger than any cache size


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
