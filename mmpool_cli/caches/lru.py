"""A byte-counted LRU driven a batch at a time: its hits at every size from one pass, where that is exact.

The cache: each batch (a request's items, in order) first pins the entries it finds (moves them to
the recent end, in the batch's order), then looks its items up in turn: a hit moves the entry to the
recent end, a miss stores it if it fits, evicting from the least recently used end (an entry larger
than the cache is never stored and evicts nothing). Batches may be dealt round robin over several
such caches of one size.

At a size ``C`` where a batch's distinct entries of at most ``C`` bytes fit together, its stores
evict none of its own entries: an item hits exactly when its entry was held when the batch came
(found at the batch's start, whatever the batch does before it), a repeat of an item in the batch
hits when its entry fits at all, and the batch leaves its entries most recent in the order of their
last lookup. That is the one-pass curve's batch used in lookup order (``curve.lru_curve`` with
``in_order``), exact at every such size. At a size below a batch's distinct bytes (``inexact``) its
stores can evict what it pinned, which the cache's owner may answer by re-storing, failing the
batch, or more: one stack does not hold it, so those sizes are replayed (the caller's replay).

Neutral: knows no engine; standard library only.
"""

from __future__ import annotations

from array import array
from bisect import bisect_right
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from itertools import accumulate, chain
from types import ModuleType

from mmpool_cli.caches.curve import INF, Curve, lru_curve
from mmpool_cli.kernels.native import compiled

# the compiled cache replays and the preparation of the pass (``batches``: the loop of batch_curve, compiled)
FAST: ModuleType | None = compiled("_cachereplay")


class ByteLru:
    """An LRU counted in bytes (cachetools' ``LRUCache`` with a size function): get, touch, put_if_fits, pop."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.order: OrderedDict[str, int] = OrderedDict()
        self.used = 0

    def __contains__(self, key: str) -> bool:
        return key in self.order

    def touch(self, key: str) -> None:
        if key in self.order:
            self.order.move_to_end(key)

    def get(self, key: str) -> bool:
        if key in self.order:
            self.order.move_to_end(key)
            return True
        return False

    def put_if_fits(self, key: str, size: int) -> bool:
        if size > self.capacity:  # "value too large": nothing is evicted
            return False
        while self.used + size > self.capacity:
            _, old = self.order.popitem(last=False)
            self.used -= old
        self.order[key] = size
        self.used += size
        return True

    def pop(self, key: str) -> None:
        size = self.order.pop(key, None)
        if size is not None:
            self.used -= size


@dataclass(frozen=True)
class Batches:
    """Batches as the compiled code reads them: dense key ids, each batch's start, per key its size and
    work; ``names[id]`` the key."""

    keys: array[int]
    starts: array[int]
    sizes: array[int]
    work: array[int]
    names: list[str]

    @classmethod
    def of(cls, requests: Sequence[Sequence[str]], sizes: Mapping[str, int], work: Mapping[str, int]) -> Batches:
        names = list(dict.fromkeys(chain.from_iterable(requests)))
        ids = {k: i for i, k in enumerate(names)}
        keys = array("q", map(ids.__getitem__, chain.from_iterable(requests)))
        starts = array("q", accumulate(map(len, requests), initial=0))
        return cls(
            keys, starts, array("q", map(sizes.__getitem__, names)), array("q", map(work.__getitem__, names)), names
        )


def replay_pinned(
    b: Batches, capacity: int, first: int = 0, step: int = 1, *, payloads: bool, mirror: bool
) -> tuple[int, int, int, list[tuple[int, int, tuple[int, ...]]]]:
    """Batches ``first``, ``first + step``, ... through one ``ByteLru`` of ``capacity`` bytes driven as
    this module's docstring says, compiled (``kernels/_cachereplay.c``'s ``lru``): ``(hits, lookups,
    work saved, failed)``. Without ``payloads`` a batch whose stores evicted an entry it found is
    aborted there (``(batch, 0, ())`` in ``failed``); with ``mirror`` a second LRU follows every
    batch not aborted (storing what the first stored, looking up what it found) and the keys it lacks
    are dropped from the first (``(batch, 1, keys)``). The engine's replay in Python is the reference.
    """
    if FAST is None:
        raise RuntimeError("the compiled cache replay is not built")
    hits, lookups, saved, failed = FAST.lru(b.keys, b.starts, b.sizes, b.work, capacity, first, step, payloads, mirror)
    return int(hits), int(lookups), int(saved), list(failed)


@dataclass(frozen=True)
class BatchCurve:
    """Hits against size of batches through one or more byte-counted LRUs, exact outside ``inexact``."""

    caches: tuple[Curve, ...]  # each cache's first lookups of its batches' items
    repeat_sizes: tuple[int, ...]  # the repeats of an item within a batch, by size
    repeat_work: tuple[int, ...]  # their work, summed in that order (0 first)
    inexact: tuple[tuple[int, int], ...]  # sorted, disjoint [lo, hi): a batch outweighs the cache there

    def exact(self, size: int) -> bool:
        """Whether the one pass gives the hits at ``size`` (no batch outweighs a cache of it)."""
        i = bisect_right(self.inexact, (size, INF)) - 1
        return i < 0 or not self.inexact[i][0] <= size < self.inexact[i][1]

    def at(self, size: int) -> tuple[int, int]:
        """``(hits, work)`` at ``size`` bytes a cache; exact where ``exact(size)``."""
        hits = work = 0
        for c in self.caches:
            h, w = c.at(size)
            hits, work = hits + h, work + w
        n = bisect_right(self.repeat_sizes, size)
        return hits + n, work + self.repeat_work[n]


def batch_curve(
    keys: Sequence[int],
    starts: Sequence[int],
    sizes: Sequence[int],
    work: Sequence[int],
    caches: int = 1,
    *,
    native: bool | None = None,
) -> BatchCurve:
    """The curve of batches ``keys[starts[b]:starts[b + 1]]`` (dense key ids) dealt round robin over
    ``caches`` LRUs; ``sizes[k]`` and ``work[k]`` are key ``k``'s bytes and what its hit saves.
    ``native`` None: the compiled kernels where built (the same curve).

    >>> c = batch_curve([0, 1, 0, 0], [0, 1, 2, 4], [6, 5], [1, 1])
    >>> [c.at(s) for s in (5, 6, 11)], c.exact(6), c.exact(11)
    ([(0, 0), (1, 1), (2, 2)], True, True)
    """
    use_native = FAST is not None if native is None else native
    if use_native:
        if FAST is None:
            raise RuntimeError("the compiled cache replay is not built")
        parts, rs, rw, sp = FAST.batches(_int64(keys), _int64(starts), _int64(sizes), _int64(work), caches)
        flat = _from_bytes(sp)
        return BatchCurve(
            tuple(
                lru_curve(
                    _from_bytes(lk),
                    _from_bytes(ls),
                    None,
                    _from_bytes(lw),
                    groups=_from_bytes(lg),
                    in_order=True,
                    native=True,
                )
                for lk, ls, lw, lg in parts
                if lk
            ),
            tuple(_from_bytes(rs)),
            tuple(accumulate(_from_bytes(rw), initial=0)),
            tuple(zip(flat[::2], flat[1::2], strict=True)),
        )
    per: list[tuple[array[int], array[int], array[int], array[int], dict[int, int]]] = [
        (array("q"), array("q"), array("q"), array("q"), {}) for _ in range(caches)
    ]
    repeats: list[tuple[int, int]] = []
    spans: list[tuple[int, int]] = []
    for b in range(len(starts) - 1):
        batch = keys[starts[b] : starts[b + 1]]
        lk, ls, lw, lg, ids = per[b % caches]
        order: list[int] = []  # distinct keys by their last lookup
        seen: set[int] = set()
        for k in reversed(batch):
            if k not in seen:
                seen.add(k)
                order.append(k)
        order.reverse()
        for k in order:
            lk.append(ids.setdefault(k, len(ids)))
            ls.append(sizes[k])
            lw.append(work[k])
            lg.append(b)
        if len(batch) > len(order):
            first: set[int] = set()
            for k in batch:
                if k in first:
                    repeats.append((sizes[k], work[k]))
                first.add(k)
        if len(order) > 1:  # where the batch's distinct entries that fit outweigh the cache
            ordered = sorted(sizes[k] for k in order)
            total = 0
            for m, s in enumerate(ordered):
                total += s
                hi = min(ordered[m + 1] if m + 1 < len(ordered) else INF, total)
                if s < hi:
                    spans.append((s, hi))
    curves = tuple(
        lru_curve(lk, ls, None, lw, groups=lg, in_order=True, native=native) for lk, ls, lw, lg, _ in per if lk
    )
    repeats.sort()
    return BatchCurve(
        curves,
        tuple(s for s, _ in repeats),
        tuple(accumulate((w for _, w in repeats), initial=0)),
        _merged(spans),
    )


def _int64(xs: Sequence[int]) -> array[int]:
    return xs if isinstance(xs, array) and xs.typecode == "q" else array("q", xs)


def _from_bytes(b: bytes) -> array[int]:
    out = array("q")
    out.frombytes(b)
    return out


def _merged(spans: list[tuple[int, int]]) -> tuple[tuple[int, int], ...]:
    out: list[tuple[int, int]] = []
    for lo, hi in sorted(spans):
        if out and lo <= out[-1][1]:
            if hi > out[-1][1]:
                out[-1] = (out[-1][0], hi)
        else:
            out.append((lo, hi))
    return tuple(out)
