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
its ``_lock``), so the events reach the queue in the pool's own order; a cuda_ipc tick is two
events, its start and its end, and a release between them is the tick's. In the allocating
thread a wrapper only appends ``(kind, pool, time, ...)``: the pool object itself, its state
looked up by the writer thread (``Registry.state``). A wrapper never raises anything of its own
into SGLang and never waits: a failure is counted (``events.Queue.error``).
"""

from __future__ import annotations

import functools
import os
import threading
import time
import weakref
from collections.abc import Callable
from typing import Any

from mmpool_record.events import ALLOC, QUEUE, RELEASE, TICK, TICK_END, VMM, put

MARK = "__mmpool_record__"


class PoolState:
    """One pool of this process, as the writer knows it: its index, transport and layout."""

    __slots__ = ("pool", "transport", "index", "pid", "layout", "__weakref__")

    def __init__(self, pool: Any, transport: str, index: int) -> None:
        self.pool = weakref.ref(pool)
        self.layout = layout(pool, transport)  # now, once: the pool may be gone when the writer next looks
        self.transport = transport
        self.index = index
        self.pid = os.getpid()


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
    """The pools this process has seen, in the order of their first event; a forked child starts anew.

    Keyed by the pool's ``id``, held by a weak reference: the registry never touches the pool's
    ``__dict__`` (reading it turns CPython's inline attribute values into a dict, and SGLang's own
    attribute reads on the pool slower), and a new pool at a dead one's address is a new pool.
    """

    def __init__(self) -> None:
        self.states: list[PoolState] = []
        self.by_id: dict[int, PoolState] = {}
        self.lock = threading.Lock()

    def state(self, pool: Any, transport: str) -> PoolState:
        """The state of ``pool``; the first call registers it."""
        st = self.by_id.get(id(pool))
        if st is not None and st.pool() is pool:
            return st
        with self.lock:
            st = self.by_id.get(id(pool))
            if st is None or st.pool() is not pool:
                st = PoolState(pool, transport, len(self.states))
                self.states.append(st)
                self.by_id[id(pool)] = st
        return st


REGISTRY = Registry()


def _marked(fn: Callable[..., Any], original: Callable[..., Any]) -> Callable[..., Any]:
    functools.update_wrapper(fn, original)
    setattr(fn, MARK, True)
    return fn


def wrap_ipc(cls: Any) -> None:
    """Wrap ``StreamOrderedMmFeaturePool``'s allocate, release and recycle tick.

    The wrappers take the methods' own parameters (the digests fix them) and append inline, with
    the deque's ``append``, the clock and the queue bound in the closure: each lookup they save is
    a few hundredths of a microsecond in SGLang's allocating thread. ``q.limit`` is 0 until this
    process's first event, which takes ``q.overflow`` and starts the writer.
    """
    allocate, release, recycle = cls._allocate_locked, cls._release_locked, cls._recycle_ready_leases_locked
    q = QUEUE
    items = q.items
    append, clock = items.append, time.monotonic_ns

    def _allocate_locked(self: Any, nbytes: int) -> Any:
        lease = allocate(self, nbytes)
        try:
            if len(items) < q.limit:
                append((ALLOC, self, clock(), nbytes, lease))
            else:
                q.overflow((ALLOC, self, clock(), nbytes, lease))
        except Exception as e:
            q.error(e)
        return lease

    def _release_locked(self: Any, lease: Any) -> Any:
        out = release(self, lease)  # SGLang's own refusal propagates as it would
        try:
            if len(items) < q.limit:
                append((RELEASE, self, clock(), lease))
            else:
                q.overflow((RELEASE, self, clock(), lease))
        except Exception as e:
            q.error(e)
        return out

    def _recycle_ready_leases_locked(self: Any) -> Any:
        try:
            put((TICK, self, clock(), (), ()))
        except Exception as e:
            q.error(e)
        try:
            return recycle(self)
        finally:
            try:
                put((TICK_END, self, clock()))
            except Exception as e:
                q.error(e)

    cls._allocate_locked = _marked(_allocate_locked, allocate)
    cls._release_locked = _marked(_release_locked, release)
    cls._recycle_ready_leases_locked = _marked(_recycle_ready_leases_locked, recycle)


class _Tick:
    """A cuda_vmm tick in progress: the chunks it may free, and whether its merge was seen."""

    __slots__ = ("pool", "before", "merged")

    def __init__(self, pool: Any, before: tuple[Any, ...]) -> None:
        self.pool, self.before, self.merged = pool, before, False


def wrap_vmm(cls: Any) -> None:
    """Wrap ``CudaVmmMemoryPool``'s reserve, release, recycle tick and the tick's merge.

    The tick frees its chunks inline, under the lock, then merges: the merge in the recycler's
    thread during its tick queues the tick (the chunks before and after). Outside a tick (every
    ``_release_reserved_chunk`` merges too) the merge wrapper only finds ``ticks`` empty.
    """
    reserve, release = cls._reserve_chunk, cls._release_reserved_chunk
    recycle, merge = cls._recycle_chunks, cls._merge_chunks
    q = QUEUE
    items = q.items
    append, clock = items.append, time.monotonic_ns
    ident = threading.get_ident
    ticks: dict[int, _Tick] = {}  # thread -> its tick in progress
    os.register_at_fork(after_in_child=ticks.clear)  # a forked child has none of its parent's threads
    alloc, free, tick = VMM | ALLOC, VMM | RELEASE, VMM | TICK

    def _reserve_chunk(self: Any, required_size: int) -> Any:
        chunk = reserve(self, required_size)
        try:
            if len(items) < q.limit:
                append((alloc, self, clock(), required_size, chunk))
            else:
                q.overflow((alloc, self, clock(), required_size, chunk))
        except Exception as e:
            q.error(e)
        return chunk

    def _release_reserved_chunk(self: Any, chunk: Any) -> Any:
        out = release(self, chunk)
        try:
            if len(items) < q.limit:
                append((free, self, clock(), chunk))
            else:
                q.overflow((free, self, clock(), chunk))
        except Exception as e:
            q.error(e)
        return out

    def _recycle_chunks(self: Any) -> Any:
        # the chunks this tick may free: it frees them inline, so the tick's merge compares
        me = None
        try:
            me = ident()
            ticks[me] = _Tick(self, tuple(self.occupied_chunks))
        except Exception as e:
            q.error(e)
        try:
            return recycle(self)
        finally:
            try:
                held = ticks.pop(me, None) if me is not None else None
                if held is None or not held.merged:  # nothing occupied (or a failed poll): a tick that freed nothing
                    put((tick, self, clock(), (), ()))
            except Exception as e:
                q.error(e)

    def _merge_chunks(self: Any) -> Any:
        if ticks:
            try:
                held = ticks.get(ident())
                if held is not None and held.pool is self and not held.merged:
                    held.merged = True  # the tick's own merge, under the lock, right after it freed its chunks
                    put((tick, self, clock(), held.before, tuple(self.occupied_chunks)))
            except Exception as e:
                q.error(e)
        return merge(self)

    cls._reserve_chunk = _marked(_reserve_chunk, reserve)
    cls._release_reserved_chunk = _marked(_release_reserved_chunk, release)
    cls._recycle_chunks = _marked(_recycle_chunks, recycle)
    cls._merge_chunks = _marked(_merge_chunks, merge)
