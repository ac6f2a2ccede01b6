"""The series of one multimodal cache (``metrics.Metrics.cache``): SGLang's embedding and preprocess caches,
vLLM's processor and encoder caches. Standard library only, like the rest of the hook's package."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

CACHE_LABELS = ("cache", "pid")
CACHE_SERIES = (
    ("mmpool_cache_capacity_bytes", "gauge", "Bytes the multimodal cache may hold."),
    ("mmpool_cache_bytes", "gauge", "Bytes the multimodal cache holds."),
    ("mmpool_cache_entries", "gauge", "Entries the multimodal cache holds."),
    ("mmpool_cache_lookups", "counter", "Lookups of the multimodal cache."),
    ("mmpool_cache_hits", "counter", "Lookups the multimodal cache answered."),
    ("mmpool_cache_insertions", "counter", "Entries put in the multimodal cache."),
    ("mmpool_cache_evictions", "counter", "Entries the multimodal cache evicted to make room."),
    ("mmpool_cache_evicted_bytes", "counter", "Bytes the multimodal cache evicted to make room."),
)
# vLLM's encoder cache only: an item it has no room for waits
WAITS = ("mmpool_cache_waits", "counter", "Items vLLM's encoder cache had no room for (they wait).")
# vLLM's encoder cache counts encoder tokens: its sizes are series of their own, never mixed with bytes
TOKEN_SERIES = {
    "mmpool_cache_capacity_bytes": ("mmpool_cache_capacity_tokens", "Encoder tokens the multimodal cache may hold."),
    "mmpool_cache_bytes": ("mmpool_cache_tokens", "Encoder tokens the multimodal cache holds."),
    "mmpool_cache_evicted_bytes": ("mmpool_cache_evicted_tokens", "Encoder tokens the multimodal cache evicted."),
}


class _Unseen:
    """A series no cache of this kind has (the waits of a cache counted in bytes)."""

    def inc(self, amount: float) -> None: ...


class CacheMetrics:
    """One multimodal cache's series, kept from its records; ``unit`` "tokens" for vLLM's encoder cache, whose
    sizes go to the ``_tokens`` series (``TOKEN_SERIES``) instead of the ``_bytes`` ones."""

    def __init__(self, sink: Any, labels: Mapping[str, str], capacity_bytes: int, unit: str = "bytes") -> None:
        s = {}
        for name, kind, doc in CACHE_SERIES:
            shown, shown_doc = TOKEN_SERIES.get(name, (name, doc)) if unit == "tokens" else (name, doc)
            s[name] = sink.series(shown, kind, shown_doc, labels)
        self._bytes, self._entries = s["mmpool_cache_bytes"], s["mmpool_cache_entries"]
        self._lookups, self._hits = s["mmpool_cache_lookups"], s["mmpool_cache_hits"]
        self._inserted, self._evicted = s["mmpool_cache_insertions"], s["mmpool_cache_evictions"]
        self._evicted_bytes = s["mmpool_cache_evicted_bytes"]
        self._waits = sink.series(*WAITS, labels) if unit == "tokens" else _Unseen()
        s["mmpool_cache_capacity_bytes"].set(capacity_bytes)
        for counter in (self._lookups, self._hits, self._inserted, self._evicted, self._evicted_bytes, self._waits):
            counter.inc(0)

    def on_wait(self) -> None:
        """An item the cache had no room for (vLLM's encoder cache)."""
        self._waits.inc(1)

    def on_lookup(self, hit: bool) -> None:
        """One lookup, a hit or a miss."""
        self._lookups.inc(1)
        if hit:
            self._hits.inc(1)

    def on_insert(self) -> None:
        """One entry put in."""
        self._inserted.inc(1)

    def on_evict(self, entries: int, nbytes: int) -> None:
        """What an insertion evicted to make room."""
        self._evicted.inc(entries)
        self._evicted_bytes.inc(nbytes)

    def on_state(self, nbytes: int, entries: int) -> None:
        """The cache's state after its latest event."""
        self._bytes.set(nbytes)
        self._entries.set(entries)
