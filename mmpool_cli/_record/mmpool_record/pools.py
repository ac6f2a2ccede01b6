"""The wrappers put around SGLang's pool methods: each runs the original, then appends one record.

What a lease is, read from SGLang 0.5.23's code (paths inside its wheel):

* cuda_ipc (``srt/multimodal/transport/memory_pool.py``): a lease starts in ``_allocate_locked``
  (248-277; ``None`` is the miss that ``MmItemMemoryPool.wrap_tensor`` sends by value,
  ``cuda_ipc.py:138-142``) and ends in ``_release_locked`` (279-288), which the recycler's
  ``_recycle_ready_leases_locked`` (299-322) calls for every acknowledged lease at one tick, and
  ``copy_tensor`` only when its copy fails (364-368). ``cancel_lease`` (371-) releases nothing
  itself: it writes the acknowledgements, and the next tick gives the lease back. The leases held
  are ``_occupied`` (slot -> ``PoolLease``).
* cuda_vmm (``srt/utils/cuda_vmm_transport_utils.py``): a chunk starts in ``_reserve_chunk``
  (548-565) and ends either in ``_recycle_chunks`` (618-651, inline, then ``_merge_chunks``) or in
  ``_release_reserved_chunk`` (567-571: a failed publish or ``cancel_proxy``). The chunks held are
  ``occupied_chunks``, each exactly the size asked (``start + required_size``).

Every one of these runs under the pool's lock (cuda_vmm's ``_publisher_condition`` is built on
its ``_lock``), so the records reach the buffer in the pool's own order; a cuda_ipc tick is two
records, its start and its end, and a release between them is the tick's. In the allocating
thread a wrapper packs ``(kind, id(pool), time, a, b, c)`` and appends it (``recorder.py``); a
pool's first event, and an event that finds the buffer full, take ``Recorder.slow``. A wrapper
never raises anything of its own into SGLang and never waits: a failure is counted.
"""

from __future__ import annotations

import functools
import os
import threading
import time
from collections.abc import Callable
from typing import Any

from mmpool_record import recfmt
from mmpool_record.recorder import PACK, RECORDER, Recorder

MARK = "__mmpool_record__"
ALLOC, RELEASE, TICK, TICK_END, TICK_FREE = recfmt.ALLOC, recfmt.RELEASE, recfmt.TICK, recfmt.TICK_END, recfmt.TICK_FREE


class IpcShape:
    """cuda_ipc's ``StreamOrderedMmFeaturePool``, as the recorder reads it."""

    transport = "cuda_ipc"
    cache = None

    @staticmethod
    def layout(pool: Any) -> dict[str, Any]:
        return {
            "memory_size": int(pool.memory_size),
            "data_start": int(pool.data_start),
            "slots": int(pool.max_inflight_slices),
            "consumers": int(pool.consumer_count),
            "recycle_interval_s": float(pool._recycle_interval),
            "transport_name": str(getattr(pool, "transport_name", "")),
            "device": int(getattr(pool, "device_id", 0)),
        }

    @staticmethod
    def held(pool: Any) -> list[tuple[int, int, int]]:
        return [(int(x.nbytes), int(x.start), int(x.end)) for x in list(pool._occupied.values())]

    @staticmethod
    def lock(pool: Any) -> Any:
        return pool._lock


class VmmShape:
    """cuda_vmm's ``CudaVmmMemoryPool``, as the recorder reads it."""

    transport = "cuda_vmm"
    cache = None

    @staticmethod
    def layout(pool: Any) -> dict[str, Any]:
        return {
            "memory_size": int(pool.allocation_size),
            "data_start": 0,
            "control_bytes": int(pool.control_size),
            "consumers": int(pool.consumer_count),
            "recycle_interval_s": float(pool._recycle_interval),
            "transport_name": str(getattr(pool, "transport_name", "CUDA VMM")),
            "device": int(getattr(pool, "device_index", 0)),
        }

    @staticmethod
    def held(pool: Any) -> list[tuple[int, int, int]]:
        return [(int(c.end) - int(c.start), int(c.start), int(c.end)) for c in list(pool.occupied_chunks)]

    @staticmethod
    def lock(pool: Any) -> Any:
        return pool._lock


def _marked(fn: Callable[..., Any], original: Callable[..., Any]) -> Callable[..., Any]:
    functools.update_wrapper(fn, original)
    setattr(fn, MARK, True)
    return fn


def _emitter(rec: Recorder, shape: Any) -> Callable[..., None]:
    """Append one record for ``pool`` (the wrappers' path off the hot one: ticks)."""
    buf, seen, slow = rec.buf, rec.seen, rec.slow
    extend = buf.extend

    def emit(pool: Any, kind: int, t: int, a: int = 0, b: int = 0, c: int = 0) -> None:
        key = id(pool)
        if key in seen and len(buf) < rec.limit:
            extend(PACK(kind, key, t, a, b, c))
        else:
            slow(pool, shape, kind, t, a, b, c)

    return emit


def wrap_ipc(cls: Any, rec: Recorder = RECORDER) -> None:
    """Wrap ``StreamOrderedMmFeaturePool``'s allocate, release and recycle tick.

    The wrappers take the methods' own parameters (the digests fix them) and append inline, the
    buffer's ``extend``, the packer and the clock bound in the closure: each lookup they save is a
    few hundredths of a microsecond in SGLang's allocating thread.
    """
    allocate, release, recycle = cls._allocate_locked, cls._release_locked, cls._recycle_ready_leases_locked
    buf, seen, shape = rec.buf, rec.seen, IpcShape()
    extend, clock, slow = buf.extend, time.monotonic_ns, rec.slow
    emit = _emitter(rec, shape)

    def _allocate_locked(self: Any, nbytes: int) -> Any:
        lease = allocate(self, nbytes)
        try:
            key = id(self)
            if key in seen and len(buf) < rec.limit:
                if lease is None:
                    extend(PACK(ALLOC, key, clock(), nbytes, -1, -1))
                else:
                    extend(PACK(ALLOC, key, clock(), nbytes, lease.start, lease.end))
            elif lease is None:
                slow(self, shape, ALLOC, clock(), nbytes, -1, -1)
            else:
                slow(self, shape, ALLOC, clock(), nbytes, lease.start, lease.end)
        except Exception as e:
            rec.error(e)
        return lease

    def _release_locked(self: Any, lease: Any) -> Any:
        out = release(self, lease)  # SGLang's own refusal propagates as it would
        try:
            key = id(self)
            if key in seen and len(buf) < rec.limit:
                extend(PACK(RELEASE, key, clock(), lease.start, lease.end, 0))
            else:
                slow(self, shape, RELEASE, clock(), lease.start, lease.end, 0)
        except Exception as e:
            rec.error(e)
        return out

    def _recycle_ready_leases_locked(self: Any) -> Any:
        try:
            emit(self, TICK, clock())
        except Exception as e:
            rec.error(e)
        try:
            return recycle(self)
        finally:
            try:
                emit(self, TICK_END, clock())
            except Exception as e:
                rec.error(e)

    cls._allocate_locked = _marked(_allocate_locked, allocate)
    cls._release_locked = _marked(_release_locked, release)
    cls._recycle_ready_leases_locked = _marked(_recycle_ready_leases_locked, recycle)


class _Tick:
    """A cuda_vmm tick in progress: the chunks it may free, and whether its merge was seen."""

    __slots__ = ("pool", "before", "merged")

    def __init__(self, pool: Any, before: tuple[Any, ...]) -> None:
        self.pool, self.before, self.merged = pool, before, False


def wrap_vmm(cls: Any, rec: Recorder = RECORDER) -> None:
    """Wrap ``CudaVmmMemoryPool``'s reserve, release, recycle tick and the tick's merge.

    The tick frees its chunks inline, under the lock, then merges: the merge in the recycler's
    thread during its tick appends the tick and the chunks it freed (those held before and not
    after). Outside a tick (every ``_release_reserved_chunk`` merges too) the merge wrapper only
    finds ``ticks`` empty.
    """
    reserve, release = cls._reserve_chunk, cls._release_reserved_chunk
    recycle, merge = cls._recycle_chunks, cls._merge_chunks
    buf, seen, shape = rec.buf, rec.seen, VmmShape()
    extend, clock, slow = buf.extend, time.monotonic_ns, rec.slow
    emit = _emitter(rec, shape)
    ident = threading.get_ident
    ticks: dict[int, _Tick] = {}  # thread -> its tick in progress
    os.register_at_fork(after_in_child=ticks.clear)  # a forked child has none of its parent's threads

    def _reserve_chunk(self: Any, required_size: int) -> Any:
        chunk = reserve(self, required_size)
        try:
            key = id(self)
            if key in seen and len(buf) < rec.limit:
                if chunk is None:
                    extend(PACK(ALLOC, key, clock(), required_size, -1, -1))
                else:
                    extend(PACK(ALLOC, key, clock(), required_size, chunk.start, chunk.end))
            elif chunk is None:
                slow(self, shape, ALLOC, clock(), required_size, -1, -1)
            else:
                slow(self, shape, ALLOC, clock(), required_size, chunk.start, chunk.end)
        except Exception as e:
            rec.error(e)
        return chunk

    def _release_reserved_chunk(self: Any, chunk: Any) -> Any:
        out = release(self, chunk)
        try:
            emit(self, RELEASE, clock(), chunk.start, chunk.end)
        except Exception as e:
            rec.error(e)
        return out

    def _recycle_chunks(self: Any) -> Any:
        # the chunks this tick may free: it frees them inline, so the tick's merge compares
        me = None
        try:
            me = ident()
            ticks[me] = _Tick(self, tuple(self.occupied_chunks))
        except Exception as e:
            rec.error(e)
        try:
            return recycle(self)
        finally:
            try:
                held = ticks.pop(me, None) if me is not None else None
                if held is None or not held.merged:  # nothing occupied (or a failed poll): a tick that freed nothing
                    emit(self, TICK, clock())
            except Exception as e:
                rec.error(e)

    def _merge_chunks(self: Any) -> Any:
        if ticks:
            try:
                held = ticks.get(ident())
                if held is not None and held.pool is self and not held.merged:
                    held.merged = True  # the tick's own merge, under the lock, right after it freed its chunks
                    t = clock()
                    emit(self, TICK, t)
                    still = {id(c) for c in self.occupied_chunks}
                    for chunk in held.before:
                        if id(chunk) not in still:
                            emit(self, TICK_FREE, t, chunk.start, chunk.end)
            except Exception as e:
                rec.error(e)
        return merge(self)

    cls._reserve_chunk = _marked(_reserve_chunk, reserve)
    cls._release_reserved_chunk = _marked(_release_reserved_chunk, release)
    cls._recycle_chunks = _marked(_recycle_chunks, recycle)
    cls._merge_chunks = _marked(_merge_chunks, merge)
