"""The wrappers put around vLLM's multimodal caches: each runs the original, then appends records.

What the caches do, read from vLLM 0.30-0.34's code:

- The processor cache's sender, one per API process (``multimodal/cache/base.py``, ``lru.py``,
  ``shm.py``; 0.30's ``multimodal/cache.py``): ``MultiModalProcessorOnlyCache`` and the ``lru``
  sender (``LruKeyReplicatedSenderCache``, 0.30's ``MultiModalProcessorSenderCache``) are a byte-counted
  LRU (``self._cache``, vLLM's cachetools ``LRUCache``); ``ShmObjectStoreSenderCache`` a ring in
  ``/dev/shm`` (``self._shm_cache``). The processor asks ``is_cached`` of a request's hashes (once per
  modality), touches every item, then calls ``get_and_update_item`` item by item: vLLM counts a query
  there, and a hit where the item is present. A miss inserts the item if it fits; ``invalidate`` (the
  ``lru`` sender) drops a key the engine core lacks.
- The encoder cache (``v1/core/encoder_cache_manager.py``, ``EncoderCacheManager``), in the engine
  core's scheduler, counted in encoder tokens: ``check_and_update_cache`` finds an item's output (a
  hit references it), ``can_allocate`` makes room by evicting unreferenced entries oldest first (or
  answers False: the item waits), ``allocate`` reserves the item's tokens, ``free_encoder_input`` drops
  a request's reference (an entry no request references stays until room is needed).

The records are read from each cache's own state around the call, so they are what the call did:
``CACHE_REQUEST`` for each ``is_cached`` (where a request's items begin), a lookup per
``get_and_update_item`` (hit or miss; bytes 0: an entry's are its insertion's), the insertion and the
evictions it made; for
the encoder cache a lookup per ``check_and_update_cache``, an insertion per ``allocate``, the evictions
and refusals of ``can_allocate``, an unreference per entry left unreferenced. Keys are vLLM's
``mm_hash`` strings, as ``text_key`` holds them. Never raising into vLLM, never waiting.
"""

from __future__ import annotations

from typing import Any

from mmpool_record import recfmt
from mmpool_record.caches import EVICT, FREE, INSERT, LOOKUP, EmbeddingShape, _clearing, _emitter, _marked, text_key
from mmpool_record.recorder import RECORDER, Recorder

REQUEST, WAIT, UNREF = recfmt.CACHE_REQUEST, recfmt.CACHE_WAIT, recfmt.CACHE_UNREF
EMIT = "__mmpool_emit__"  # a wrapped get_and_update_item's attribute: its sender's emitter
# the processor cache's sender classes, by the type vLLM's --mm-processor-cache-type gives
SENDERS = {
    "MultiModalProcessorOnlyCache": "processor_only",
    "LruKeyReplicatedSenderCache": "lru",
    "MultiModalProcessorSenderCache": "lru",  # 0.30.0's name for it
    "ShmObjectStoreSenderCache": "shm",
}


class ProcessorShape(EmbeddingShape):
    """A sender of vLLM's processor cache, as the recorder reads it."""

    cache = "vllm_processor"

    def __init__(self, cache_type: str) -> None:
        self.cache_type = cache_type

    def layout(self, cache: Any) -> dict[str, Any]:  # type: ignore[override]
        out: dict[str, Any] = {recfmt.K_CACHE_TYPE: self.cache_type}
        if self.cache_type == "shm":
            store = cache._shm_cache
            out[recfmt.K_CACHE_BYTES] = int(store.ring_buffer.data_buffer_size)
            out[recfmt.K_MAX_OBJECT] = int(store.max_object_size)
        else:
            out[recfmt.K_CACHE_BYTES] = int(cache._cache.maxsize)  # a float of bytes: sizes are whole, so its floor
        return out


class EncoderShape(EmbeddingShape):
    """vLLM's ``EncoderCacheManager``, as the recorder reads it: sizes in encoder tokens."""

    cache = "vllm_encoder"

    @staticmethod
    def layout(cache: Any) -> dict[str, Any]:
        return {recfmt.K_CACHE_BYTES: int(cache.cache_size), recfmt.K_CACHE_UNIT: "tokens"}


def _lru_has(cache: Any, key: Any) -> bool:
    return key in cache._cache  # is_cached_item's own test, without its call (0.30-0.34 alike)


def _ring_has(cache: Any, key: Any) -> bool:
    return key in cache._shm_cache.key_index  # is_cached_item's: the ring's is_cached


def _lru_state(cache: Any) -> tuple[int, int]:
    return len(cache._cache), int(cache._cache.currsize)


def _lru_size(cache: Any, key: Any) -> int:
    return int(cache._cache._Cache__size[key])  # cachetools keeps each entry's getsizeof here


def _ring_state(cache: Any) -> tuple[int, int]:
    store = cache._shm_cache
    ring = store.ring_buffer
    return len(store.key_index), int(ring.data_buffer_end - ring.data_buffer_start)


def _ring_size(cache: Any, key: Any) -> int:
    """The object's bytes (flag, metadata and data): its ring chunk less the chunk's header."""
    ring = cache._shm_cache.ring_buffer
    with ring.access_buf(cache._shm_cache.key_index[key][0]) as (_, meta):
        return int(meta[1]) - int(ring.MD_SIZE)


def wrap_processor(cls: Any, cache_type: str, rec: Recorder = RECORDER) -> None:
    """Wrap a sender's ``get_and_update_item``, ``invalidate`` (where it has its own) and ``clear_cache``.

    ``cache_type``: ``processor_only``, ``lru`` or ``shm`` (``SENDERS``). The bytes are those vLLM counts:
    ``get_item_size`` for the LRU senders, the object's bytes in the ring for ``shm`` (its chunk less the
    8-byte header; the state's bytes are the ring's occupied span).
    """
    emit = _emitter(rec, ProcessorShape(cache_type))
    has, state, size = (
        (_ring_has, _ring_state, _ring_size) if cache_type == "shm" else (_lru_has, _lru_state, _lru_size)
    )
    update, clear = cls.get_and_update_item, cls.clear_cache

    def update_wrapper(self: Any, mm_item: Any, mm_hash: Any) -> Any:
        try:
            had = has(self, mm_hash)  # does not move the entry
            count, used = (0, 0) if had else state(self)  # a hit evicts nothing
        except Exception as e:
            rec.error(e)
            return update(self, mm_item, mm_hash)
        try:
            out = update(self, mm_item, mm_hash)
        except BaseException:
            try:  # vLLM counted the query before it failed (a request whose cached item is gone)
                emit(self, LOOKUP, text_key(mm_hash), int(had), 0)
            except Exception as e:
                rec.error(e)
            raise
        try:
            key = text_key(mm_hash)
            emit(self, LOOKUP, key, int(had), 0)  # a hit's bytes are its insertion's, recorded before it
            if not had:
                now_count, now_used = state(self)
                stored = has(self, mm_hash)
                nbytes = size(self, mm_hash) if stored else -1
                emit(self, INSERT, key, nbytes, now_used)
                evicted = count + stored - now_count
                if evicted > 0:
                    chunk = nbytes + 8 if cache_type == "shm" else nbytes  # the ring's span counts chunks
                    emit(self, EVICT, evicted, used + chunk - now_used)
        except Exception as e:
            rec.error(e)
        return out

    clear_wrapper = _clearing(rec, emit, clear, lambda cache: state(cache)[1])
    cls.get_and_update_item = _marked(update_wrapper, update)
    setattr(cls.get_and_update_item, EMIT, emit)  # where is_cached finds it
    cls.clear_cache = _marked(clear_wrapper, clear)
    if "invalidate" in cls.__dict__:
        invalidate = cls.invalidate

        def invalidate_wrapper(self: Any, mm_hash: Any) -> Any:
            try:
                had = has(self, mm_hash)
                nbytes = size(self, mm_hash) if had else 0
            except Exception as e:
                rec.error(e)
                return invalidate(self, mm_hash)
            out = invalidate(self, mm_hash)
            try:
                if had and not has(self, mm_hash):
                    emit(self, FREE, text_key(mm_hash), nbytes)
            except Exception as e:
                rec.error(e)
            return out

        cls.invalidate = _marked(invalidate_wrapper, invalidate)


def wrap_is_cached(cls: Any, rec: Recorder = RECORDER) -> None:
    """Wrap ``BaseMultiModalProcessorCache.is_cached``: the processor asks it of a request's hashes (per
    modality) before it looks any of them up, so it marks where a request's items begin."""
    is_cached = cls.is_cached

    def is_cached_wrapper(self: Any, mm_hashes: Any) -> Any:
        out = is_cached(self, mm_hashes)
        try:
            # the emitter of this sender's recorded lookups; none where its class is not wrapped
            emit = getattr(type(self).get_and_update_item, EMIT, None)
            if emit is not None:
                emit(self, REQUEST, len(out), 0)
        except Exception as e:
            rec.error(e)
        return out

    cls.is_cached = _marked(is_cached_wrapper, is_cached)


def wrap_encoder(cls: Any, rec: Recorder = RECORDER) -> None:
    """Wrap ``EncoderCacheManager``'s ``check_and_update_cache``, ``can_allocate``, ``allocate``,
    ``free_encoder_input`` and ``reset`` (``free`` reaches the entries through ``free_encoder_input``)."""
    emit = _emitter(rec, EncoderShape())
    check, can, alloc, unref, reset = (
        cls.check_and_update_cache,
        cls.can_allocate,
        cls.allocate,
        cls.free_encoder_input,
        cls.reset,
    )

    def check_wrapper(self: Any, request: Any, input_id: int) -> Any:
        out = check(self, request, input_id)
        try:
            emit(self, LOOKUP, text_key(request.mm_features[input_id].identifier), int(bool(out)), 0)
        except Exception as e:
            rec.error(e)
        return out

    def can_wrapper(self: Any, request: Any, input_id: int, *args: Any, **kwargs: Any) -> Any:
        try:
            before = (len(self.cached), int(self.num_free_slots))
        except Exception as e:
            rec.error(e)
            return can(self, request, input_id, *args, **kwargs)
        out = can(self, request, input_id, *args, **kwargs)
        try:
            count, free = before
            evicted = count - len(self.cached)
            if evicted > 0:
                emit(self, EVICT, evicted, int(self.num_free_slots) - free)
            if not out:
                mm_hash = request.mm_features[input_id].identifier
                tokens = int(request.get_num_encoder_embeds(input_id))
                emit(self, WAIT, text_key(mm_hash), tokens, int(self.num_free_slots))
        except Exception as e:
            rec.error(e)
        return out

    def alloc_wrapper(self: Any, request: Any, input_id: int) -> Any:
        try:
            free = int(self.num_free_slots)
        except Exception as e:
            rec.error(e)
            return alloc(self, request, input_id)
        out = alloc(self, request, input_id)
        try:
            mm_hash = request.mm_features[input_id].identifier
            used = int(self.cache_size) - int(self.num_free_slots)
            emit(self, INSERT, text_key(mm_hash), free - int(self.num_free_slots), used)
        except Exception as e:
            rec.error(e)
        return out

    def unref_wrapper(self: Any, request: Any, input_id: int) -> Any:
        try:
            freeable = int(self.num_freeable_slots)
        except Exception as e:
            rec.error(e)
            return unref(self, request, input_id)
        out = unref(self, request, input_id)
        try:
            grown = int(self.num_freeable_slots) - freeable
            if grown > 0:
                emit(self, UNREF, text_key(request.mm_features[input_id].identifier), grown)
        except Exception as e:
            rec.error(e)
        return out

    reset_wrapper = _clearing(rec, emit, reset, lambda cache: int(cache.cache_size) - int(cache.num_free_slots))
    cls.check_and_update_cache = _marked(check_wrapper, check)
    cls.can_allocate = _marked(can_wrapper, can)
    cls.allocate = _marked(alloc_wrapper, alloc)
    cls.free_encoder_input = _marked(unref_wrapper, unref)
    cls.reset = _marked(reset_wrapper, reset)
