"""The lookups SGLang 0.5.23's scheduler makes in its embedding cache, and how many it counts at a size.

``managers/mm_schedule.py`` drives the cache per modality of each request: one lookup per distinct
item when every item of that modality is one run of placeholder tokens (an item the request holds
twice is looked up again where its first lookup missed), else one lookup of the combined hash of the
request's items of that modality (Qwen3-VL's videos). An item inside the radix cache's served prefix
is never looked up (``_item_overlap``). ``caches`` replays them; ``tune`` reads them at every KV size
(``Behind``; compiled in ``kernels/_behind.c`` where it was built, the Python code the reference).

Pure core: standard library only.
"""

from __future__ import annotations

import operator
from array import array
from bisect import bisect_left
from collections.abc import Iterable, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from types import ModuleType

from mmpool_cli.caches.replay import Lookups, replay_many
from mmpool_cli.caches.report import CacheItem
from mmpool_cli.engines.sglang import prefix
from mmpool_cli.inputs.traffic.cache_request import CacheRequest
from mmpool_cli.kernels.native import compiled

EMPTY: frozenset[int] = frozenset()
FAST: ModuleType | None = compiled("_behind")
_requests = prefix.requests_of


@dataclass(frozen=True)
class _Lookups:
    # lists, or int64 arrays where the compiled kernel made them (the same lookups: compare them as lists)
    keys: list[int] | array[int]
    sizes: list[int] | array[int]
    weights: list[int] | array[int]
    work: list[int] | array[int]
    groups: list[int] | array[int]  # the batch each lookup belongs to (all its lookups come before its stores)
    unique: int = 0  # lookups SGLang counts as one miss each (the preprocess cache)
    shared: list[int] | None = None  # bytes each miss adds to every entry of its batch (one batch tensor)
    max_entries: int = 0
    # a lookup's other occurrences in its batch (the embedding cache): SGLang looks such an item up again
    # for each where its first lookup missed (mm_schedule.py _batch_encode_per_image_misses), once where it hit
    dups: list[int] | array[int] | None = None
    spans: list[tuple[int, int]] | None = field(default=None, compare=False)  # each batch's [i, j), where known
    # (work, repeats, whether each key has one size), where the kernel counted them as it made the lookups
    counted: tuple[int, int, bool] | None = field(default=None, compare=False)

    def neutral(self) -> Lookups:
        lk = Lookups(self.keys, self.sizes, self.weights, self.work, self.groups, self.shared, self.max_entries)
        if self.spans is not None:
            lk.__dict__["batches"] = self.spans  # its cached ``batches``, known already: not found again
        return lk


class _Ids:
    """Dense ids for keys; an unknown key (None) gets a fresh id each time (an item used once)."""

    def __init__(self) -> None:
        self.ids: dict[object, int] = {}
        self.n = 0

    def __call__(self, key: object) -> int:
        if key is None:
            self.n += 1
            return self.n - 1
        got = self.ids.get(key)
        if got is None:
            got = self.ids[key] = self.n
            self.n += 1
        return got


# a request's items of one modality: whether they take one combined lookup (its key id, else -1), and each
# item's index, content key, tokens and key id (the same id for the same key, traffic-wide)
Batch = tuple[bool, int, list[tuple[int, str | None, int, int]]]


def modal_batches(
    req: CacheRequest, tokens: list[int], groups: Iterable[list[tuple[int, CacheItem]]] | None = None
) -> list[Batch]:
    """Each request's items of one modality (``managers/mm_utils.py`` ``embed_mm_inputs``: one at a time), in
    order, with their keys' ids (an item without a key, and a combined key with one, its own): what
    ``embedding_lookups`` walks, made once for every set of covered items. ``groups``: the requests' items
    (``prefix.requests_of``), where made already."""
    ids = _Ids()
    qwen3 = req.family.name == "qwen3-vl"
    out: list[Batch] = []
    for group in _requests(req.items) if groups is None else groups:
        videos = [(i, it) for i, it in group if it.kind == "video"]
        if len(videos) < len(group):  # its images first, then its videos (the ids in that order)
            images = group if not videos else [(i, it) for i, it in group if it.kind != "video"]
            out.append((False, -1, [(i, it.key, tokens[i], ids(it.key)) for i, it in images]))
        if not videos:
            continue
        whole = [(i, it.key, tokens[i], ids(it.key)) for i, it in videos]
        combined = -1
        if qwen3:  # several runs per video: the combined hash of every item of the request
            combo = tuple(key for _, key, _, _ in whole)
            combined = ids(None if None in combo else ("combined", combo))
        out.append((combined >= 0, combined, whole))
    return out


def embedding_lookups(
    req: CacheRequest,
    tokens: list[int],
    width: int,
    covered: AbstractSet[int] = EMPTY,
    batches: list[Batch] | None = None,
) -> _Lookups:
    """The lookups; an item in ``covered`` (in its request's cached prefix) is never looked up (``_item_overlap``).
    ``batches``: ``modal_batches(req, tokens)``, where it was made already."""
    keys: list[int] = []
    sizes: list[int] = []
    work: list[int] = []
    groups: list[int] = []
    dups: list[int] = []
    row = width * 2
    batch = 0
    dense: dict[int, int] = {}  # key id -> its id among these lookups (dense from 0, in order of first lookup)
    for combined, combined_id, whole in modal_batches(req, tokens) if batches is None else batches:
        mine = [x for x in whole if x[0] not in covered] if covered else whole
        if not mine:
            continue
        batch += 1
        if combined:  # every item of the request, once one overlaps the part computed
            n = sum(x[2] for x in whole)
            keys.append(dense.setdefault(combined_id, len(dense)))
            sizes.append(n * row)
            work.append(n)
            groups.append(batch)
            dups.append(0)
            continue
        seen: dict[int, int] = {}  # key id -> its first lookup
        for _, key, n, kid in mine:
            if key is not None:
                first = seen.get(kid)
                if first is not None:
                    dups[first] += 1  # looked up again only where the first lookup missed
                    continue
                seen[kid] = len(keys)
            dups.append(0)
            keys.append(dense.setdefault(kid, len(dense)))
            sizes.append(n * row)
            work.append(n)
            groups.append(batch)
    return _Lookups(keys, sizes, [1] * len(keys), work, groups, dups=dups)


def looked_up_work(looks: _Lookups) -> int:
    """The encoder tokens of every lookup, each computed once where it misses (what a cache of 0 bytes computes)."""
    if looks.counted is not None:  # every weight 1
        return looks.counted[0]
    return sum(w * k for w, k in zip(looks.weights, looks.work, strict=True))


def one_size(looks: _Lookups) -> bool:
    """Whether every lookup of a key has the same bytes."""
    if looks.counted is not None:
        return looks.counted[2]
    first: dict[int, int] = {}
    return all(first.setdefault(k, s) == s for k, s in zip(looks.keys, looks.sizes, strict=True))


def embedding_lookups_at(looks: _Lookups, size: int) -> int:
    """The lookups SGLang's scheduler makes in an embedding cache of ``size`` bytes: one per distinct item
    of a batch, and one more for each other occurrence of an item whose first lookup missed (its
    ``get_single`` runs again, and misses again: nothing is stored before the batch is encoded)."""
    return embedding_lookups_many(looks, [size])[0]


def embedding_lookups_many(looks: _Lookups, sizes: Sequence[int]) -> list[int]:
    """``embedding_lookups_at`` at each of ``sizes``, the lookups walked once per size at most."""
    dups = looks.dups if looks.dups is not None else []
    extra = looks.counted[1] if looks.counted is not None else sum(dups)
    wanted = sorted({size for size in sizes if size > 0}) if extra else []
    hit: dict[int, int] = {}
    if wanted:  # the other occurrences of the items that hit are not looked up again
        zero = array("q", bytes(8 * len(dups)))
        counted = Lookups(looks.keys, looks.sizes, dups, zero, looks.groups, looks.shared, looks.max_entries)
        hit = {size: h for size, (h, _) in zip(wanted, replay_many(counted, wanted, jobs=1), strict=True)}
    return [len(looks.keys) + extra - hit.get(size, 0) for size in sizes]


class Behind:
    """The embedding cache's lookups behind the radix cache at any number of its sizes, the traffic walked
    once: ``at(served)`` equals ``embedding_lookups`` over ``prefix.covered_by(built, served)``, with the
    lookups the radix cache spared (``prefix.spared``), without a set of covered items per size.

    A request's items lie in its prompt in the order they came, each run ending past the one before, so
    the items a served prefix covers are the first few of its request; each batch's lookups are made
    once per number of them covered (a chat's turns see few), and read from there at every size."""

    def __init__(self, batches: list[Batch], groups: list[list[tuple[int, CacheItem]]], built: prefix.Built) -> None:
        self.batches = batches
        # a request's items are consecutive indices: its first, and each item's request
        starts = [group[0][0] for group in groups]
        request_of: list[int] = []
        for g, group in enumerate(groups):
            request_of += [g] * len(group)
        self.group_of = [request_of[whole[0][0]] for _, _, whole in batches]
        self.places = [
            [x[0] - starts[g] for x in whole] for g, (_, _, whole) in zip(self.group_of, batches, strict=True)
        ]
        # each replayed request: its group and its items' last offsets, in order (None: not in order)
        self.ends: list[tuple[int, list[int]]] | None = []
        for items in built.last_ends:
            g = request_of[items[0][0]]
            indices, ends = [i for i, _ in items], [end for _, end in items]
            first = starts[g]
            in_order = len(items) == len(groups[g]) and indices == list(range(first, first + len(items)))
            if not in_order or not all(map(operator.lt, ends, ends[1:])):
                self.ends = None
                break
            self.ends.append((g, ends))
        # the distinct keys among each request's first k items, k = 0.. (what a cover of k spares)
        self.distinct: list[list[int]] = []
        for group in groups:
            seen = {it.key if it.key is not None else i for i, it in group}
            if len(seen) == len(group):
                self.distinct.append(list(range(len(group) + 1)))
                continue
            seen = set()
            counts = [0]
            for i, it in group:
                seen.add(it.key if it.key is not None else i)
                counts.append(len(seen))
            self.distinct.append(counts)
        self.groups = len(groups)
        self._made: list[dict[int, tuple[list[int], list[int], list[int], list[int]]]] = [{} for _ in batches]
        self._flat = self._flatten() if FAST is not None and self.ends is not None else None

    def _flatten(self) -> tuple[bytes | array[int], ...]:
        """The batches, items, replayed requests and requests as the compiled kernel reads them (int64
        columns), made once for every capacity."""
        assert FAST is not None
        assert self.ends is not None
        wholes = [whole for _, _, whole in self.batches]
        starts, kids = FAST.flat(wholes, 3)
        ends, rends = FAST.flat([e for _, e in self.ends], -1)
        return (
            array("q", self.group_of),
            array("q", [cid if combined else -1 for combined, cid, _ in self.batches]),
            starts,
            FAST.flat(self.places, -1)[1],
            kids,
            array("q", [x[1] is not None for whole in wholes for x in whole]),
            FAST.flat(wholes, 2)[1],
            array("q", [g for g, _ in self.ends]),
            ends,
            rends,
            *FAST.flat(self.distinct, -1),
        )

    @property
    def exact(self) -> bool:
        """Whether every replayed request's items lie in its prompt in order (else ``covered_by`` is walked)."""
        return self.ends is not None

    def covers(self, served: Sequence[int]) -> list[int]:
        """Each request's items wholly inside its served prefix: how many of its first."""
        assert self.ends is not None
        k = [0] * self.groups
        for n, (g, ends) in zip(served, self.ends, strict=True):
            if n > ends[0]:
                k[g] = bisect_left(ends, n)
        return k

    def spared(self, k: list[int]) -> int:
        """``prefix.spared``: one lookup per distinct covered item of a request."""
        return sum(d[c] for d, c in zip(self.distinct, k, strict=True) if c)

    def lookups(self, served: Sequence[int], width: int) -> tuple[_Lookups, int]:
        """``at(covers(served), width)`` and ``spared`` of it, in one call of the compiled kernel where it
        was built (int64 arrays: no list of the lookups made)."""
        if self._flat is None:
            k = self.covers(served)
            return self.at(k, width), self.spared(k)
        assert FAST is not None
        keys, sizes, work, groups, dups, spared, total, repeats, one = FAST.lookups(*self._flat, served, width * 2)
        cols = [array("q") for _ in range(5)]
        for col, raw in zip(cols, (keys, sizes, work, groups, dups), strict=True):
            col.frombytes(raw)
        ones = array("q", [1]) * len(cols[0])
        return _Lookups(cols[0], cols[1], ones, cols[2], cols[3], dups=cols[4], counted=(total, repeats, one)), spared

    def at(self, k: list[int], width: int) -> _Lookups:
        """``embedding_lookups`` with each request's first ``k`` items covered."""
        row = width * 2
        raw: list[int] = []
        sizes: list[int] = []
        work: list[int] = []
        groups: list[int] = []
        dups: list[int] = []
        spans: list[tuple[int, int]] = []
        batch = 0
        for b, (combined, combined_id, whole) in enumerate(self.batches):
            c = k[self.group_of[b]]
            if c:
                c = bisect_left(self.places[b], c)  # the batch's items among those covered
                if c == len(whole):
                    continue
            batch += 1
            made = self._made[b].get(c)
            if made is None:
                made = self._made[b][c] = _made(combined, combined_id, whole, c, row)
            ks, ss, ws, ds = made
            spans.append((len(raw), len(raw) + len(ks)))
            raw += ks
            sizes += ss
            work += ws
            dups += ds
            groups += [batch] * len(ks)
        dense: dict[int, int] = {}
        keys = [dense.setdefault(kid, len(dense)) for kid in raw]
        return _Lookups(keys, sizes, [1] * len(keys), work, groups, dups=dups, spans=spans)


def _made(
    combined: bool, combined_id: int, whole: list[tuple[int, str | None, int, int]], c: int, row: int
) -> tuple[list[int], list[int], list[int], list[int]]:
    """One batch's lookups (key ids, bytes, work, repeats) with its first ``c`` items covered, as
    ``embedding_lookups`` makes them."""
    if combined:
        n = sum(x[2] for x in whole)
        return [combined_id], [n * row], [n], [0]
    keys: list[int] = []
    sizes: list[int] = []
    work: list[int] = []
    dups: list[int] = []
    seen: dict[int, int] = {}
    for _, key, n, kid in whole[c:]:
        if key is not None:
            first = seen.get(kid)
            if first is not None:
                dups[first] += 1
                continue
            seen[kid] = len(keys)
        dups.append(0)
        keys.append(kid)
        sizes.append(n * row)
        work.append(n)
    return keys, sizes, work, dups
