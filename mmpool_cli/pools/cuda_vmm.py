"""SGLang 0.5.23's cuda_vmm feature pools (``utils/cuda_vmm_transport_utils.py``), replayed.

The pool is the worker's share rounded down to the VMM granularity, with no header and no slot
cap. Each chunk is ``align_up(align_up(C * 4, 256) + data, 256)`` bytes, the consumers' ack words
in front of the data (``wrap_tensor``). Chunks are reserved by best fit, the first of equal sizes
in list order, the rest of the range appended (``_reserve_chunk``): the free list of
``pool.Pool``. A request with two or more image or video features is packed into one chunk, each
tensor at the next multiple of its element size (``wrap_items`` -> ``wrap_tensors``); when that
chunk does not fit, every tensor gets a chunk of its own. Reconstructing one child of a packed
chunk acknowledges the whole chunk, so the first ``free`` among its tensors releases it. The
recycler frees fully acknowledged chunks and joins the free list, and does nothing when no chunk
is occupied (``_recycle_chunks``).
"""

from __future__ import annotations

from typing import Any

from mmpool_cli.core.units import align_up
from mmpool_cli.pools.allocator import MISS_SPACE, Allocator, PoolRules
from mmpool_cli.pools.results import PoolLayout, SimResult, _tick, finish
from mmpool_cli.traces.events import FREE, Events

NO_SLOT_CAP = 1 << 62


def vmm_rules(control_bytes: int, alignment: int) -> PoolRules:
    """The cuda_vmm allocator's rules: chunks aligned to ``alignment``, ``control_bytes`` in front, no cap."""
    return PoolRules("cuda_vmm", alignment, NO_SLOT_CAP, control_bytes)


def vmm_layout(
    workers: int, per_worker: int, granularity: int, control_bytes: int, recycle_ns: int, alignment: int
) -> PoolLayout:
    """The cuda_vmm pools for a share of ``per_worker`` bytes: the share rounded down to ``granularity``."""
    allocation = per_worker // granularity * granularity
    return PoolLayout(workers, allocation, 0, recycle_ns, vmm_rules(control_bytes, alignment))


def packed_offsets(sizes: list[int], elems: list[int]) -> tuple[list[int], int]:
    """Each tensor's offset in a packed chunk's data, and the data's bytes (``_build_packed_tensor_layout``)."""
    offsets = []
    end = 0
    for nbytes, elem in zip(sizes, elems, strict=True):
        end = -(-end // elem) * elem
        offsets.append(end)
        end += nbytes
    return offsets, end


def simulate_vmm(
    ev: Events, layout: PoolLayout, record: bool, pool_factory: Any, stop_items: int, stop_bytes: int
) -> SimResult:
    """Replay ``ev`` through ``layout.workers`` cuda_vmm pools (``replay.simulate`` calls this).

    A request's tensors are placed together at its first alloc, but each tensor's figures (a miss,
    the pool's free bytes at it) count at its own alloc, so a run stopped after an alloc
    (``stop_items``, ``stop_bytes``: as ``replay.simulate``) counts exactly the allocs it processed.
    """
    interval = layout.recycle_ns
    control = layout.control_bytes
    n = layout.workers
    pools: list[Allocator] = [pool_factory(layout.memory_size, 0, layout.rules) for _ in range(n)]
    alignment = layout.rules.alignment
    items, nbytes_in, fb_items, fb_bytes, slot_misses = [0] * n, [0] * n, [0] * n, [0] * n, [0] * n
    peak_bytes, peak_leases = [0] * n, [0] * n
    miss_free, miss_largest, fragmented = [0] * n, [0] * n, [0] * n
    due = [-1] * n
    usable = layout.usable_bytes
    # key -> [worker, chunk start, chunk bytes, time leased, acknowledged]; the members of a packed
    # chunk share one list. None: the tensor missed.
    live: dict[int, list[int] | None] = {}
    decided: dict[int, int] = {}  # key -> data offset (-1: missed), for requests placed at their first alloc
    # key -> the pool's free bytes, largest free range, and whether the free bytes would have held it, at its miss
    missed_at: dict[int, tuple[int, int, bool]] = {}
    missed = missed_bytes = 0  # fallback of all workers, for the stop
    stopped = False
    count = 0
    offsets: list[int | None] = []
    workers_of: list[int] = []
    times, ops, keys, sizes, owners = ev.t, ev.op, ev.key, ev.nbytes, ev.worker
    groups = ev.group if ev.group is not None else keys  # no requests: each alloc its own
    total = len(ev)
    run_end = 0
    requests: dict[int, list[int]] = {}  # group -> the indexes of its allocs, in this run of equal t
    t = 0

    def place(w: int, nbytes: int, key: int, now: int) -> int:
        """One chunk for one tensor: its data offset, or -1."""
        pool = pools[w]
        start = pool.alloc(control + nbytes)
        if start == MISS_SPACE:
            live[key] = None
            free = usable - pool.leased_bytes
            missed_at[key] = (free, pool.largest_free, free >= align_up(control + nbytes, alignment))
            return -1
        live[key] = [w, start, control + nbytes, now, 0]
        return start + control

    for i in range(total):
        t = times[i]
        key = keys[i]
        if ops[i] == FREE:
            lease = live.pop(key)
            if lease is None or lease[4]:
                continue  # missed, or a packed chunk another of its tensors already acknowledged
            lease[4] = 1
            w = lease[0]
            tick_at = due[w]
            if 0 <= tick_at < t:
                _tick(pools[w], tick_at, peak_bytes, peak_leases, w)
                tick_at = -1
            pools[w].acked.append((0, lease[1], lease[2], lease[3]))
            if tick_at < 0:
                due[w] = -(-t // interval) * interval
            continue
        w = owners[i]
        tick_at = due[w]
        if 0 <= tick_at < t:
            _tick(pools[w], tick_at, peak_bytes, peak_leases, w)
            due[w] = tick_at = -1
        nbytes = sizes[i]
        items[w] += 1
        nbytes_in[w] += nbytes
        if key in decided:
            offset = decided.pop(key)
        else:
            if i >= run_end:  # a new instant: find the requests of its allocs
                requests.clear()
                j = i
                while j < total and times[j] == t:
                    if ops[j] != FREE:
                        requests.setdefault(groups[j], []).append(j)
                    j += 1
                run_end = j
            members = requests.get(groups[i], [i])
            if len(members) == 1:
                offset = place(w, nbytes, key, t)
            else:
                offset = _place_request(members, i, w, t, ev, place, pools, live, decided, control)
        if record:
            offsets.append(offset if offset >= 0 else None)
            workers_of.append(w)
        if offset < 0:
            free, largest, split = missed_at.pop(key)
            fb_items[w] += 1
            fb_bytes[w] += nbytes
            miss_free[w] += free
            miss_largest[w] += largest
            fragmented[w] += split
            missed += 1
            missed_bytes += nbytes
            if missed > stop_items or missed_bytes > stop_bytes:
                stopped = True
                count = i + 1
                break
        elif tick_at < 0:
            due[w] = -(-t // interval) * interval
    else:
        count = total
    unacked = {id(lease): lease for lease in live.values() if lease is not None and not lease[4]}
    leases = [(lease[0], lease[1], lease[2], lease[3]) for lease in unacked.values()]
    ids = (ev.ids or []) if record else []
    if record and ev.ids is None:
        ids = [k for k, op in zip(keys, ops, strict=True) if op != FREE]
    if record and stopped:
        ids = ids[: len(offsets)]
    columns = [items, nbytes_in, fb_items, fb_bytes, slot_misses, peak_bytes, peak_leases, miss_free, miss_largest]
    return finish(
        pools, leases, due, layout, count, t, [*columns, fragmented], record, offsets, ids, workers_of, stopped
    )


def _place_request(members, i, w, t, ev, place, pools, live, decided, control) -> int:  # type: ignore[no-untyped-def]
    """Place every tensor of the request whose first alloc is ``i``; the offset of ``i``'s tensor."""
    keys, sizes, packs, elems = ev.key, ev.nbytes, ev.pack, ev.elem
    packed = [j for j in members if packs[j]]
    placed: dict[int, int] = {}
    if len(packed) >= 2:
        rel, data = packed_offsets([sizes[j] for j in packed], [max(elems[j], 1) for j in packed])
        start = pools[w].alloc(control + data)
        if start >= 0:
            lease = [w, start, control + data, t, 0]
            for j, r in zip(packed, rel, strict=True):
                live[keys[j]] = lease
                placed[j] = start + control + r
    for j in members:  # the rest, and every tensor when the packed chunk did not fit: one chunk each
        if j not in placed:
            placed[j] = place(w, sizes[j], keys[j], t)
    for j in members:
        if j != i:
            decided[keys[j]] = placed[j]
    return placed[i]
