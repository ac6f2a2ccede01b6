"""vLLM 0.30-0.34's multimodal processor cache replayed over a sequence of requests, at one size.

A request is the ordered list of its items' keys (vLLM's ``mm_hash``); every item has one size in
bytes (``MultiModalCache.get_item_size`` for the LRU caches, the ring chunk for ``shm``). Each request
goes through the processor cache as ``_cached_apply_hf_processor`` drives it
(``multimodal/processing/processor.py:1345-1567``): ``is_cached`` of every item (no reordering), the
payloads still held (``get_cached_item``), ``touch_sender_cache_item`` of every item, then
``get_and_update_item`` item by item, then ``release_sender_touches``.

- ``processor_only`` (``cache/base.py``): an LRU counted in bytes (cachetools' ``LRUCache`` under
  vLLM's ``utils/cache.py``); an item larger than the cache is never inserted (``cache_if_fits``);
  a get that finds the item is a hit and moves it last. It keeps payloads, so an item evicted by
  an earlier insert of the same request is inserted again.
- ``lru`` (``cache/lru.py``): the same LRU holding only sizes in the API process, mirrored by the
  engine core's receiver. An item that was cached when the request arrived but was evicted by the
  request's own inserts has no payload left: vLLM fails the request (``AssertionError``), having
  already inserted the items before it. The receiver then lacks what the sender holds; a later
  request that the sender answers from cache fails in the engine core
  (``MultiModalCacheMissError``) and the sender drops those keys (``invalidate``).
- ``shm`` (``cache/shm.py``, ``shm_object_storage.py``): a ring in ``/dev/shm`` freed oldest first;
  an object is reclaimable once every reader has read it and the current request has not touched it.
  Assumed here: the workers have read every earlier request's items before the next request is
  processed (the ring then holds back only the current request's items).

Hits and lookups are vLLM's own counters (``vllm:mm_cache_hits`` / ``vllm:mm_cache_queries``): a
lookup per ``get_and_update_item``. The byte-counted LRU and the ring are neutral (``caches/lru.py``,
``caches/ring.py``); this module drives them as vLLM does, in Python (the reference) or through
their compiled replays. Pure core: standard library only.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import ModuleType
from typing import Literal

from mmpool_cli.caches import lru, ring
from mmpool_cli.caches.lru import Batches, ByteLru
from mmpool_cli.caches.ring import RING_CHUNK_HEADER as RING_CHUNK_HEADER  # the shm chunk's header, re-exported

Layout = Literal["processor_only", "lru", "shm"]
FAST: ModuleType | None = lru.FAST


@dataclass
class ReplayResult:
    """What one replay at one size gave: vLLM's counters, the per-request outcome and failures."""

    capacity: int
    hits: list[int]  # per API process
    lookups: list[int]
    flags: list[str]  # per request, one letter per item: H cached when the request arrived, M not (if asked)
    failed: list[tuple[int, str, tuple[str, ...]]] = field(default_factory=list)  # request, where, keys
    saved: int = 0  # the work the hits saved: the ``work`` of each item hit (default its size)

    @property
    def total_hits(self) -> int:
        return sum(self.hits)

    @property
    def total_lookups(self) -> int:
        return sum(self.lookups)


def _lru_request(
    cache: ByteLru, keys: Sequence[str], sizes: Mapping[str, int], payloads: bool
) -> tuple[list[str], int, list[bool] | None]:
    """One request through an LRU sender: (the keys hit, lookups, per item whether it went without
    data), the last None where vLLM fails the request."""
    cached = [k in cache for k in keys]
    for k in keys:
        cache.touch(k)
    hit: list[str] = []
    lookups = 0
    bare: list[bool] = []
    for k, was in zip(keys, cached, strict=True):
        lookups += 1
        if cache.get(k):
            hit.append(k)
            bare.append(True)
            continue
        if was and not payloads:
            return hit, lookups, None  # vLLM: AssertionError "Expected a cached item"
        cache.put_if_fits(k, sizes[k])
        bare.append(False)
    return hit, lookups, bare


def _receiver(cache: ByteLru, keys: Sequence[str], bare: Sequence[bool], sizes: Mapping[str, int]) -> list[str]:
    """The engine core's receiver (``LruKeyReplicatedReceiverCache``): the keys it lacked."""
    for k in keys:
        cache.touch(k)
    missing: list[str] = []
    for k, without_data in zip(keys, bare, strict=True):
        if not without_data:
            cache.pop(k)
            cache.put_if_fits(k, sizes[k])
        elif not cache.get(k):
            missing.append(k)
    return missing


def keeps_payloads(layout: Layout, release: str) -> bool:
    """Whether the sender still has the payload of an item it found cached when the request arrived:
    ``processor_only`` from 0.34.0 (``get_cached_item`` before the touches); earlier releases, and the
    ``lru`` sender always, fail the request instead.

    >>> keeps_payloads("processor_only", "0.34.0"), keeps_payloads("processor_only", "0.33.0")
    (True, False)
    """
    return layout == "processor_only" and version_key(release) >= (0, 34, 0)


def version_key(text: str) -> tuple[int, ...]:
    """``"0.33.0"`` -> ``(0, 33, 0)``, for comparing releases."""
    return tuple(int(part) for part in text.split(".")[:3])


def replay(
    requests: Sequence[Sequence[str]],
    sizes: Mapping[str, int],
    capacity: int,
    layout: Layout,
    *,
    api_processes: int = 1,
    max_object: int = 128 << 20,
    work: Mapping[str, int] | None = None,
    release: str = "0.34.0",
    flags: bool = False,
    native: bool | None = None,
) -> ReplayResult:
    """Replay ``requests`` (each its items' keys) through a processor cache of ``capacity`` bytes.

    ``sizes`` maps each key to its bytes: ``get_item_size`` for ``processor_only`` and ``lru``, the
    shm object (``shm_object_bytes``) for ``shm``; ``work`` what a hit on each saves (default its
    size). Requests are dealt round robin over ``api_processes`` caches (``processor_only``).
    ``release`` is the vLLM release whose rules apply (0.30.0 to 0.34.0); ``flags`` keeps each request's
    H/M letters (for the fixtures). ``native`` None: the compiled replay where built and no flags are
    asked (the same figures and failures: ``tests/engines/vllm/test_processor_replay.py``).

    >>> r = replay([["a"], ["b"], ["a"]], {"a": 6, "b": 5}, 11, "processor_only", flags=True)
    >>> r.flags, r.total_hits, r.total_lookups
    (['M', 'M', 'H'], 1, 3)
    """
    n = api_processes if layout == "processor_only" else 1
    work = sizes if work is None else work
    if native is None:
        native = FAST is not None and not flags
    if native:
        return replay_dense(Batches.of(requests, sizes, work), capacity, layout, n, max_object, release)
    if layout == "shm":
        hits, lookups, saved, marks = ring.replay(requests, sizes, work, capacity, max_object, flags=flags)
        return ReplayResult(capacity, [hits], [lookups], marks, saved=saved)
    payloads = keeps_payloads(layout, release)
    # the engine core's receiver holds what the sender holds until a request fails in the sender
    # (only then do they drift): replay it only where one did
    result = _lru_replay(requests, sizes, work, capacity, n, payloads, flags, mirror=False)
    if layout == "lru" and result.failed:
        result = _lru_replay(requests, sizes, work, capacity, n, payloads, flags, mirror=True)
    return result


def _lru_replay(
    requests: Sequence[Sequence[str]],
    sizes: Mapping[str, int],
    work: Mapping[str, int],
    capacity: int,
    n: int,
    payloads: bool,
    flags: bool,
    *,
    mirror: bool,
) -> ReplayResult:
    hits, lookups, marks = [0] * n, [0] * n, []
    failed: list[tuple[int, str, tuple[str, ...]]] = []
    saved = 0
    senders = [ByteLru(capacity) for _ in range(n)]
    receiver = ByteLru(capacity) if mirror else None
    for index, keys in enumerate(requests):
        p = index % n
        cache = senders[p]
        if flags:
            marks.append("".join("H" if k in cache else "M" for k in keys))
        hit, q, bare = _lru_request(cache, keys, sizes, payloads)
        hits[p] += len(hit)
        saved += sum(work[k] for k in hit)
        lookups[p] += q
        if bare is None:
            failed.append((index, "sender", ()))
            continue
        if receiver is not None:
            missing = _receiver(receiver, keys, bare, sizes)
            if missing:
                failed.append((index, "engine core", tuple(missing)))
                for k in missing:
                    cache.pop(k)
    return ReplayResult(capacity, hits, lookups, marks, failed, saved)


def replay_dense(
    d: Batches,
    capacity: int,
    layout: Layout,
    api_processes: int = 1,
    max_object: int = 128 << 20,
    release: str = "0.34.0",
) -> ReplayResult:
    """``replay`` by the compiled kernel (``_cachereplay``), of requests made dense once for many sizes."""
    if FAST is None:
        raise RuntimeError("the compiled cache replay is not built")
    n = api_processes if layout == "processor_only" else 1
    payloads = keeps_payloads(layout, release)
    if layout == "shm":
        hits, lookups, saved = ring.replay_dense(d, capacity, max_object)
        return ReplayResult(capacity, [hits], [lookups], [], saved=saved)
    out = ReplayResult(capacity, [0] * n, [0] * n, [])
    for p in range(n):
        # the engine core's receiver (lru) follows the sender in the same pass: it lacks nothing until the
        # sender fails a request, so the figures are those of the Python replay, which mirrors only then
        mirror = layout == "lru"
        hits, lookups, saved, failed = lru.replay_pinned(d, capacity, p, n, payloads=payloads, mirror=mirror)
        out.hits[p], out.lookups[p] = hits, lookups
        out.saved += saved
        for b, where, keys in failed:
            out.failed.append((b, ("sender", "engine core")[where], tuple(d.names[k] for k in keys)))
    out.failed.sort(key=lambda f: f[0])
    return out
