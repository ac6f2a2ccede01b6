"""The wrappers put around SGLang's pool methods: each runs the original, then queues one tuple.

What a lease is, read from SGLang 0.5.23's code (paths inside its wheel):

* cuda_ipc (``srt/multimodal/transport/memory_pool.py``): a lease starts in ``_allocate_locked``
  (248-277; ``None`` is the miss that ``MmItemMemoryPool.wrap_tensor`` sends by value,
  ``cuda_ipc.py:138-142``) and ends in ``_release_locked`` (279-288), which the recycler's
  ``_recycle_ready_leases_locked`` (299-322) calls for every acknowledged lease at one tick, and
  ``copy_tensor`` only when its copy fails (364-368). ``cancel_lease`` (371-) releases nothing
  itself: it writes the acknowledgements, and the next tick gives the lease back.
* cuda_vmm (``srt/utils/cuda_vmm_transport_utils.py``): a chunk starts in ``_reserve_chunk``
  (548-565) and ends either in ``_recycle_chunks`` (618-651, inline, then ``_merge_chunks``) or in
  ``_release_reserved_chunk`` (567-571: a failed publish or ``cancel_proxy``).

Every one of these runs under the pool's lock (cuda_vmm's ``_publisher_condition`` is built on
its ``_lock``), so the events reach the queue in the pool's own order. A wrapper never raises
anything of its own into SGLang and never waits: a failure is counted (``events.Queue.error``).
"""

from __future__ import annotations

import functools
import os
import threading
import weakref
from collections.abc import Callable
from typing import Any

from mmpool_record.events import ALLOC, QUEUE, RELEASE, TICK, now, put

MARK = "__mmpool_record__"


class PoolState:
    """One pool of this process, as the hook knows it: its index and the recycler's tick in progress."""

    __slots__ = (
        "pool",
        "transport",
        "index",
        "pid",
        "layout",
        "in_tick",
        "tick_thread",
        "merged",
        "before",
        "__weakref__",
    )

    def __init__(self, pool: Any, transport: str, index: int) -> None:
        self.pool = weakref.ref(pool)
        self.layout = layout(pool, transport)  # now, once: the pool may be gone before the writer looks
        self.transport = transport
        self.index = index
        self.pid = os.getpid()
        self.in_tick = False
        self.tick_thread = 0
        self.merged = False
        self.before: tuple[Any, ...] = ()


def layout(pool: Any, transport: str) -> dict[str, Any]:
    """What the manifest says of a pool: its layout, read from the attributes SGLang's ``__init__`` sets."""
    try:
        out: dict[str, Any]
        if transport == "cuda_vmm":
            out = {"memory_size": int(pool.allocation_size), "data_start": 0, "control_bytes": int(pool.control_size)}
        else:
            out = {
                "memory_size": int(pool.memory_size),
                "data_start": int(pool.data_start),
                "slots": int(pool.max_inflight_slices),
            }
        out["consumers"] = int(pool.consumer_count)
        out["recycle_interval_s"] = float(pool._recycle_interval)
        out["transport_name"] = str(getattr(pool, "transport_name", "CUDA VMM" if transport == "cuda_vmm" else ""))
        out["device"] = int(getattr(pool, "device_id", getattr(pool, "device_index", 0)))
        return out
    except Exception as e:
        QUEUE.error(e)
        return {}


class Registry:
    """The pools this process has seen; a forked child starts a registry of its own."""

    def __init__(self) -> None:
        self.key = f"_mmpool_record_{os.getpid()}"  # the parent's state, inherited by a fork, is not the child's
        self.states: list[PoolState] = []
        self.lock = threading.Lock()
        self.on_new: Callable[[PoolState], None] | None = None

    def state(self, pool: Any, transport: str) -> PoolState:
        """The state of ``pool``; the first call registers it (and starts the writer)."""
        st: PoolState | None = pool.__dict__.get(self.key)
        if st is not None:
            return st
        with self.lock:
            st = pool.__dict__.get(self.key)
            if st is None:
                st = PoolState(pool, transport, len(self.states))
                self.states.append(st)
                pool.__dict__[self.key] = st
                if self.on_new is not None:
                    self.on_new(st)
        return st


REGISTRY = Registry()


def _marked(fn: Callable[..., Any], original: Callable[..., Any]) -> Callable[..., Any]:
    functools.update_wrapper(fn, original)
    setattr(fn, MARK, True)
    return fn


def wrap_ipc(cls: Any) -> None:
    """Wrap ``StreamOrderedMmFeaturePool``'s allocate, release and recycle tick.

    The wrappers take the methods' own parameters (the digests fix them) and append to the queue
    inline: each call they save is a tenth of a microsecond in SGLang's allocating thread.
    """
    allocate, release, recycle = cls._allocate_locked, cls._release_locked, cls._recycle_ready_leases_locked
    registry, q, clock = REGISTRY, QUEUE, now

    def _allocate_locked(self: Any, nbytes: int) -> Any:
        lease = allocate(self, nbytes)
        try:
            st = self.__dict__.get(registry.key) or registry.state(self, "cuda_ipc")
            items = q.items
            if len(items) < q.capacity:
                items.append((ALLOC, st, clock(), nbytes, lease))
            else:
                q.dropped += 1
        except Exception as e:
            q.error(e)
        return lease

    def _release_locked(self: Any, lease: Any) -> Any:
        out = release(self, lease)  # SGLang's own refusal propagates as it would
        try:
            st = self.__dict__.get(registry.key) or registry.state(self, "cuda_ipc")
            items = q.items
            if len(items) < q.capacity:
                items.append((RELEASE, st, clock(), lease, st.in_tick))
            else:
                q.dropped += 1
        except Exception as e:
            q.error(e)
        return out

    def _recycle_ready_leases_locked(self: Any) -> Any:
        st = None
        try:
            st = self.__dict__.get(registry.key) or registry.state(self, "cuda_ipc")
            st.in_tick = True
            put((TICK, st, clock(), (), ()))
        except Exception as e:
            q.error(e)
        try:
            return recycle(self)
        finally:
            if st is not None:
                st.in_tick = False

    cls._allocate_locked = _marked(_allocate_locked, allocate)
    cls._release_locked = _marked(_release_locked, release)
    cls._recycle_ready_leases_locked = _marked(_recycle_ready_leases_locked, recycle)


def wrap_vmm(cls: Any) -> None:
    """Wrap ``CudaVmmMemoryPool``'s reserve, release, recycle tick and the tick's merge."""
    reserve, release = cls._reserve_chunk, cls._release_reserved_chunk
    recycle, merge = cls._recycle_chunks, cls._merge_chunks
    registry, q, clock = REGISTRY, QUEUE, now
    ident = threading.get_ident

    def _reserve_chunk(self: Any, required_size: int) -> Any:
        chunk = reserve(self, required_size)
        try:
            st = self.__dict__.get(registry.key) or registry.state(self, "cuda_vmm")
            items = q.items
            if len(items) < q.capacity:
                items.append((ALLOC, st, clock(), required_size, chunk))
            else:
                q.dropped += 1
        except Exception as e:
            q.error(e)
        return chunk

    def _release_reserved_chunk(self: Any, chunk: Any) -> Any:
        out = release(self, chunk)
        try:
            st = self.__dict__.get(registry.key) or registry.state(self, "cuda_vmm")
            items = q.items
            if len(items) < q.capacity:
                items.append((RELEASE, st, clock(), chunk, False))
            else:
                q.dropped += 1
        except Exception as e:
            q.error(e)
        return out

    def _recycle_chunks(self: Any) -> Any:
        # the chunks this tick may free: it frees them inline, so the tick's merge compares
        st = None
        try:
            st = self.__dict__.get(registry.key) or registry.state(self, "cuda_vmm")
            st.before = tuple(self.occupied_chunks)
            st.tick_thread = ident()
            st.merged = False
            st.in_tick = True
        except Exception as e:
            q.error(e)
        try:
            return recycle(self)
        finally:
            if st is not None:
                st.in_tick = False
                if not st.merged:  # nothing occupied (or a failed poll): a tick that freed nothing
                    try:
                        put((TICK, st, clock(), (), ()))
                    except Exception as e:
                        q.error(e)

    def _merge_chunks(self: Any) -> Any:
        try:
            st = self.__dict__.get(registry.key)
            if st is not None and st.in_tick and not st.merged and st.tick_thread == ident():
                st.merged = True  # the tick's own merge, under the lock, right after it freed its chunks
                put((TICK, st, clock(), st.before, tuple(self.occupied_chunks)))
        except Exception as e:
            q.error(e)
        return merge(self)

    cls._reserve_chunk = _marked(_reserve_chunk, reserve)
    cls._release_reserved_chunk = _marked(_release_reserved_chunk, release)
    cls._recycle_chunks = _marked(_recycle_chunks, recycle)
    cls._merge_chunks = _marked(_merge_chunks, merge)
