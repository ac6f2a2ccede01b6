"""The lookups SGLang 0.5.23's scheduler makes in its embedding cache, and how many it counts at a size.

``managers/mm_schedule.py`` drives the cache per modality of each request: one lookup per distinct
item when every item of that modality is one run of placeholder tokens (an item the request holds
twice is looked up again where its first lookup missed), else one lookup of the combined hash of the
request's items of that modality (Qwen3-VL's videos). An item inside the radix cache's served prefix
is never looked up (``_item_overlap``). ``caches`` replays them; ``tune`` reads them at every KV size.

Pure core: standard library only.
"""

from __future__ import annotations

from collections.abc import Set as AbstractSet
from dataclasses import dataclass

from mmpool_cli.caches.replay import Lookups, replay
from mmpool_cli.engines.sglang import prefix
from mmpool_cli.inputs.traffic.cache_request import CacheRequest

EMPTY: frozenset[int] = frozenset()
_requests = prefix.requests_of


@dataclass(frozen=True)
class _Lookups:
    keys: list[int]
    sizes: list[int]
    weights: list[int]
    work: list[int]
    groups: list[int]  # the batch each lookup belongs to (all its lookups come before its stores)
    unique: int = 0  # lookups SGLang counts as one miss each (the preprocess cache)
    shared: list[int] | None = None  # bytes each miss adds to every entry of its batch (one batch tensor)
    max_entries: int = 0
    # a lookup's other occurrences in its batch (the embedding cache): SGLang looks such an item up again
    # for each where its first lookup missed (mm_schedule.py _batch_encode_per_image_misses), once where it hit
    dups: list[int] | None = None

    def neutral(self) -> Lookups:
        return Lookups(self.keys, self.sizes, self.weights, self.work, self.groups, self.shared, self.max_entries)


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


def modal_batches(req: CacheRequest, tokens: list[int]) -> list[Batch]:
    """Each request's items of one modality (``managers/mm_utils.py`` ``embed_mm_inputs``: one at a time), in
    order, with their keys' ids (an item without a key, and a combined key with one, its own): what
    ``embedding_lookups`` walks, made once for every set of covered items."""
    ids = _Ids()
    qwen3 = req.family.name == "qwen3-vl"
    out: list[Batch] = []
    for group in _requests(req.items):
        for video in (False, True):
            whole = [(i, it.key, tokens[i], ids(it.key)) for i, it in group if (it.kind == "video") == video]
            if not whole:
                continue
            combined = -1
            if video and qwen3:  # several runs per video: the combined hash of every item of the request
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
    return sum(w * k for w, k in zip(looks.weights, looks.work, strict=True))


def embedding_lookups_at(looks: _Lookups, size: int) -> int:
    """The lookups SGLang's scheduler makes in an embedding cache of ``size`` bytes: one per distinct item
    of a batch, and one more for each other occurrence of an item whose first lookup missed (its
    ``get_single`` runs again, and misses again: nothing is stored before the batch is encoded)."""
    dups = looks.dups or []
    extra = sum(dups)
    if extra and size > 0:  # the other occurrences of the items that hit are not looked up again
        counted = Lookups(looks.keys, looks.sizes, dups, [0] * len(dups), looks.groups, looks.shared, looks.max_entries)
        extra -= replay(counted, size)[0]
    return len(looks.keys) + extra
