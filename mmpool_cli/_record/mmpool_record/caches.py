"""The wrappers put around SGLang's multimodal embedding cache: each runs the original, then appends records.

What the cache does, read from SGLang 0.5.23's code (``srt/mem_cache/multimodal_cache.py``):
``MultiModalStaticCache`` is an LRU counted in bytes (``max_size``, ``current_size``) over an
``OrderedDict`` of ``EmbeddingResult``s, keyed by SGLang's hash of an item (``get`` looks up the
combined hash of a request's items, ``get_single`` one item's). ``set`` moves a present key to the
front; refuses an entry larger than the cache; else evicts from the least recently used end until
the entry fits, and inserts it (its size the tensor's storage bytes, ``_get_tensor_size``).
``free`` takes one entry out, ``clear`` all. The scheduler drives it from one thread.

The wrappers read the cache's own state around each call (its length, ``current_size``, whether the
key is there), so what they record is what the call did, whichever release's ``set`` ran: a lookup
(hit or miss, the entry's bytes), an insertion (the entry's bytes, or present, or not admitted) and
the evictions it made (entries, bytes), a removal. Never raising into SGLang, never waiting; the
records go to the process's recorder as the pools' do.
"""

from __future__ import annotations

import functools
import hashlib
import time
from collections.abc import Callable
from typing import Any

from mmpool_record import recfmt
from mmpool_record.pools import MARK
from mmpool_record.recorder import PACK, RECORDER, Recorder

LOOKUP, INSERT, EVICT, FREE = recfmt.CACHE_LOOKUP, recfmt.CACHE_INSERT, recfmt.CACHE_EVICT, recfmt.CACHE_FREE
key64 = recfmt.key64


class EmbeddingShape:
    """SGLang's ``MultiModalStaticCache``, as the recorder reads it."""

    transport = ""
    cache = "embedding"

    @staticmethod
    def layout(cache: Any) -> dict[str, Any]:
        return {recfmt.K_CACHE_BYTES: int(cache.max_size)}

    @staticmethod
    def held(cache: Any) -> list[tuple[int, int, int]]:
        return []

    @staticmethod
    def lock(cache: Any) -> Any:
        return None


def _nbytes(entry: Any) -> int:
    """An entry's bytes as SGLang counts them (``_get_tensor_size``: the tensor's storage)."""
    return int(entry.embedding.untyped_storage().nbytes())


def _marked(fn: Callable[..., Any], original: Callable[..., Any]) -> Callable[..., Any]:
    functools.update_wrapper(fn, original)
    setattr(fn, MARK, True)
    return fn


def _emitter(rec: Recorder, shape: Any) -> Callable[..., None]:
    """The one way a cache's wrappers append a record: straight to the buffer once the cache is known."""
    buf, seen = rec.buf, rec.seen
    extend, clock, slow = buf.extend, time.monotonic_ns, rec.slow

    def emit(cache: Any, kind: int, a: int, b: int, c: int = 0) -> None:
        key = id(cache)
        if key in seen and len(buf) < rec.limit:
            extend(PACK(kind, key, clock(), a, b, c))
        else:
            slow(cache, shape, kind, clock(), a, b, c)

    return emit


def _clearing(rec: Recorder, emit: Callable[..., None], clear: Callable[..., Any], held: Callable[[Any], int]) -> Any:
    """A wrapper of ``clear`` (or a reset) recording what it took out (``held(cache)`` before it) as one removal."""

    def clear_wrapper(self: Any) -> Any:
        try:
            size = held(self)
        except Exception as e:
            rec.error(e)
            return clear(self)
        out = clear(self)
        try:
            if size:
                emit(self, FREE, 0, size)
        except Exception as e:
            rec.error(e)
        return out

    return clear_wrapper


def wrap_embedding(cls: Any, rec: Recorder = RECORDER) -> None:
    """Wrap ``MultiModalStaticCache``'s ``get``, ``get_single``, ``set``, ``free`` and ``clear``."""
    get, get_single, set_, free, clear = cls.get, cls.get_single, cls.set, cls.free, cls.clear
    emit = _emitter(rec, EmbeddingShape())

    def looked_up(cache: Any, key: Any, found: Any) -> None:
        try:
            if key is not None:
                emit(cache, LOOKUP, key64(key), int(found is not None), 0 if found is None else _nbytes(found))
        except Exception as e:
            rec.error(e)

    def get_wrapper(self: Any, mm_hashes: Any, *args: Any, **kwargs: Any) -> Any:
        found = get(self, mm_hashes, *args, **kwargs)
        try:
            key = self.combine_hashes(mm_hashes)  # the key get looked up, as it computes it
        except Exception as e:
            rec.error(e)
            return found
        looked_up(self, key, found)
        return found

    def get_single_wrapper(self: Any, mm_hash: Any) -> Any:
        found = get_single(self, mm_hash)
        looked_up(self, mm_hash, found)
        return found

    def set_wrapper(self: Any, mm_hash: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            before = (len(self.mm_cache), int(self.current_size), mm_hash in self.mm_cache)
        except Exception as e:
            rec.error(e)
            return set_(self, mm_hash, *args, **kwargs)
        out = set_(self, mm_hash, *args, **kwargs)
        try:
            count, size, had = before
            now = self.mm_cache.get(mm_hash)
            nbytes = -1 if now is None else 0 if had else _nbytes(now)
            emit(self, INSERT, key64(mm_hash), nbytes, int(self.current_size))
            evicted = count + (nbytes > 0) - len(self.mm_cache)
            if evicted > 0:
                emit(self, EVICT, evicted, size + max(nbytes, 0) - int(self.current_size))
        except Exception as e:
            rec.error(e)
        return out

    def free_wrapper(self: Any, mm_hash: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            size = int(self.current_size)
        except Exception as e:
            rec.error(e)
            return free(self, mm_hash, *args, **kwargs)
        out = free(self, mm_hash, *args, **kwargs)
        try:
            if size != int(self.current_size):
                emit(self, FREE, key64(mm_hash), size - int(self.current_size))
        except Exception as e:
            rec.error(e)
        return out

    clear_wrapper = _clearing(rec, emit, clear, lambda cache: int(cache.current_size))
    cls.get = _marked(get_wrapper, get)
    cls.get_single = _marked(get_single_wrapper, get_single)
    cls.set = _marked(set_wrapper, set_)
    cls.free = _marked(free_wrapper, free)
    cls.clear = _marked(clear_wrapper, clear)


# SGLang's scheduler (mm_schedule.py): each call looks one batch of items up in the embedding cache, then
# stores its misses; the per-image path batches every request of a forward pass (one call), the others one
# request each. A record marks where each begins, so that a batch of hits only is not read as one with the next.
BATCHES = ("_batch_encode_per_image_misses", "_get_chunked_embedding_by_item", "_get_chunked_embedding_full")


def wrap_batches(module: Any, rec: Recorder = RECORDER) -> None:
    """Wrap ``mm_schedule``'s functions in ``BATCHES``: a ``CACHE_BATCH`` of the module's embedding cache first."""
    emit = _emitter(rec, EmbeddingShape())

    def marking(original: Callable[..., Any]) -> Callable[..., Any]:
        def batch_wrapper(*args: Any, **kwargs: Any) -> Any:
            try:
                cache = module.embedding_cache
                if cache is not None:
                    emit(cache, recfmt.CACHE_BATCH, 0, 0)
            except Exception as e:
                rec.error(e)
            return original(*args, **kwargs)

        return _marked(batch_wrapper, original)

    for name in BATCHES:
        setattr(module, name, marking(module.__dict__[name]))


class PreprocessShape(EmbeddingShape):
    """SGLang's ``MultimodalPreprocessCache`` (a tokenizer process's host RAM), as the recorder reads it."""

    cache = "preprocess"

    @staticmethod
    def layout(cache: Any) -> dict[str, Any]:
        return {recfmt.K_CACHE_BYTES: int(cache.max_size_bytes), recfmt.K_CACHE_ENTRIES: int(cache.max_entries)}


_KEYS: dict[Any, int] = {}  # text_key's answers: a cache's keys recur (that is what it is for)
KEYS_MAX = 16384  # then it starts again: bounded, a few MiB at most


def text_key(key: Any) -> int:
    """A string key (SGLang's preprocess cache's artifact key, vLLM's ``mm_hash``) as a record holds it: 64
    bits of its blake2b, the same in every process (Python's ``hash`` of a string is not). Remembered for
    the next lookup of the same key: a blake2b costs about a microsecond, a dictionary's lookup a tenth."""
    try:
        found = _KEYS.get(key)
    except TypeError:  # unhashable
        found = None
    if found is not None:
        return found
    if isinstance(key, int):
        return key64(key)
    data = key.encode() if isinstance(key, str) else bytes(key) if isinstance(key, (bytes, bytearray)) else None
    if data is None:
        return key64(hash(key))
    value = int.from_bytes(hashlib.blake2b(data, digest_size=8).digest(), "little", signed=True)
    if len(_KEYS) >= KEYS_MAX:
        _KEYS.clear()
    _KEYS[key] = value
    return value


def wrap_preprocess(cls: Any, rec: Recorder = RECORDER) -> None:
    """Wrap ``MultimodalPreprocessCache``'s ``get``, ``get_if_present``, ``lookup_or_claim_many``, ``put``,
    ``pop`` and ``clear``; its other methods reach the cache through these (``get_or_compute``: ``get`` and
    ``put``; ``complete_miss``: ``put``).

    What the class does (SGLang 0.5.18-0.5.23, ``srt/multimodal/cache/preprocess_cache.py``): an LRU of
    ``_Entry(value, size_bytes)`` bounded by ``max_size_bytes`` and ``max_entries``; ``get`` counts a hit or a
    miss; ``get_if_present`` counts a hit only (an absent key is not a miss: recorded with bytes -1, which no
    series counts, for the order of a request's items; a rejected entry may be taken out);
    ``lookup_or_claim_many`` counts a hit or a miss per key (a rejected entry taken out first); ``put``
    takes out a present key's entry, evicts from the least recently used end while the bytes or the entries
    would pass their bound, and inserts (its bytes ``estimate_cache_size_bytes`` unless given), or refuses an
    entry larger than the cache, a disabled cache's, or a computation older than a ``clear``. The records are
    read from the entries around each call: hits and misses as the class counts them, with the entry's bytes.
    The processor calls it from the tokenizer's event loop (``complete_miss`` after its executor's work is
    awaited), one thread, so what changed around a call is that call's doing.
    """
    get, present, claim, put, pop, clear = (
        cls.get,
        cls.get_if_present,
        cls.lookup_or_claim_many,
        cls.put,
        cls.pop,
        cls.clear,
    )
    emit = _emitter(rec, PreprocessShape())

    def taken(cache: Any, key: Any, entry: Any) -> None:
        """``entry`` (there before the call) taken out by it: a removal."""
        if entry is not None and cache._entries.get(key) is not entry:
            emit(cache, FREE, text_key(key), int(entry.size_bytes))

    def get_wrapper(self: Any, key: Any) -> Any:
        found = get(self, key)
        try:
            entry = self._entries.get(key) if found is not None else None
            emit(self, LOOKUP, text_key(key), int(found is not None), 0 if entry is None else int(entry.size_bytes))
        except Exception as e:
            rec.error(e)
        return found

    def present_wrapper(self: Any, key: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            before = self._entries.get(key)
        except Exception as e:
            rec.error(e)
            return present(self, key, *args, **kwargs)
        found = present(self, key, *args, **kwargs)
        try:
            if found is not None and before is not None:
                emit(self, LOOKUP, text_key(key), 1, int(before.size_bytes))
            else:  # rejected (taken out) or absent: no lookup to the class; kept (bytes -1) for the order
                taken(self, key, before)
                if self.max_size_bytes > 0:  # a disabled cache (the Qwen-VL default) records nothing
                    emit(self, LOOKUP, text_key(key), 0, -1)
        except Exception as e:
            rec.error(e)
        return found

    def claim_wrapper(self: Any, keys: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            before = [self._entries.get(k) for k in keys]
        except Exception as e:
            rec.error(e)
            return claim(self, keys, *args, **kwargs)
        out = claim(self, keys, *args, **kwargs)
        try:
            if self.max_size_bytes > 0:  # a disabled cache counts nothing
                for key, entry, got in zip(keys, before, out, strict=True):
                    if getattr(got, "hit", False):
                        emit(self, LOOKUP, text_key(key), 1, int(entry.size_bytes) if entry is not None else 0)
                    else:
                        taken(self, key, entry)
                        emit(self, LOOKUP, text_key(key), 0, 0)
        except Exception as e:
            rec.error(e)
        return out

    def put_wrapper(self: Any, key: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            before = (len(self._entries), int(self.current_size_bytes), self._entries.get(key))
        except Exception as e:
            rec.error(e)
            return put(self, key, *args, **kwargs)
        out = put(self, key, *args, **kwargs)
        try:
            count, size, old = before
            if self.max_size_bytes <= 0:  # disabled: refused before it looks at anything
                return out
            entry = self._entries.get(key) if out else None
            if entry is None:
                emit(self, INSERT, text_key(key), -1, int(self.current_size_bytes))
                return out
            nbytes = int(entry.size_bytes)
            if old is not None:  # put takes the present entry out first, then inserts the new one
                emit(self, FREE, text_key(key), int(old.size_bytes))
                count, size = count - 1, size - int(old.size_bytes)
            emit(self, INSERT, text_key(key), nbytes, int(self.current_size_bytes))
            evicted = count + 1 - len(self._entries)
            if evicted > 0:
                emit(self, EVICT, evicted, size + nbytes - int(self.current_size_bytes))
        except Exception as e:
            rec.error(e)
        return out

    def pop_wrapper(self: Any, key: Any) -> Any:
        try:
            before = self._entries.get(key)
        except Exception as e:
            rec.error(e)
            return pop(self, key)
        out = pop(self, key)
        try:
            taken(self, key, before)
        except Exception as e:
            rec.error(e)
        return out

    clear_wrapper = _clearing(rec, emit, clear, lambda cache: int(cache.current_size_bytes))
    cls.get = _marked(get_wrapper, get)
    cls.get_if_present = _marked(present_wrapper, present)
    cls.lookup_or_claim_many = _marked(claim_wrapper, claim)
    cls.put = _marked(put_wrapper, put)
    cls.pop = _marked(pop_wrapper, pop)
    cls.clear = _marked(clear_wrapper, clear)
