"""One tokenizer worker's cuda_ipc feature pool, allocating as SGLang 0.5.23 does.

The rules (``StreamOrderedMmFeaturePool`` in ``multimodal/transport/memory_pool.py``):

* a feature of ``nbytes`` takes ``align_up(nbytes, 256)`` bytes;
* best fit: the smallest free range that holds it, and among ranges of that size the one
  earliest in SGLang's free list; the rest of the range is appended to the end of the list;
* at most 4096 leases are in flight; with none left the feature misses even if it would fit;
* a miss sends that feature over the CPU path (SGLang returns no lease; nothing waits);
* a lease whose consumers have all acknowledged it is given back at the recycler's next tick.
  A tick that finds at least one lease in flight gives back every acknowledged lease, then
  sorts the free list by start and joins touching ranges; a tick with none in flight does nothing.

SGLang scans its whole list on each allocation. Here the free ranges live in a list sorted by
``(size, position in SGLang's list)``, so best fit is one bisection. The position needs no
renumbering: after a tick's merge SGLang's list is in start order, so a range present at the last
merge ranks by its start, and one appended since ranks after all of those, in append order. Both
are packed into one integer key so that comparisons stay cheap.
"""

from __future__ import annotations

from bisect import bisect_left, insort

from mmpool_cli.sglang.rules import DATA_ALIGNMENT, MAX_INFLIGHT_SLICES

# key = size << _SIZE_SHIFT | appended << _RANK_BITS | rank, where rank is the start of a range
# present at the last merge, or the append counter of one appended since.
_RANK_BITS = 44
_APPENDED = 1 << _RANK_BITS
_SIZE_SHIFT = _RANK_BITS + 1
_RANK_MASK = _APPENDED - 1
MAX_POOL_BYTES = _APPENDED  # starts must fit in the rank field: 16 TiB, far above any GPU

MISS_SPACE = -1  # no free range holds the feature
MISS_SLOTS = -2  # a range holds it, but all in-flight slots are taken


class Pool:
    """The free ranges, in-flight leases and acknowledgements of one worker's pool.

    ``memory_size`` is the worker's share of the budget and ``data_start`` the control header
    before the data region (``ipc_header_bytes``); both as SGLang computes them.
    """

    __slots__ = (
        "data_start",
        "memory_size",
        "max_leases",
        "leases",
        "leased_bytes",
        "_keys",
        "_by_start",
        "_by_end",
        "_appended",
        "_counter",
        "_acked",
    )

    def __init__(self, memory_size: int, data_start: int, max_leases: int = MAX_INFLIGHT_SLICES) -> None:
        if not 0 <= data_start < memory_size <= MAX_POOL_BYTES:
            raise ValueError(f"pool of {memory_size} bytes cannot hold a {data_start}-byte header")
        if max_leases <= 0:
            raise ValueError("max_leases must be positive")
        self.data_start = data_start
        self.memory_size = memory_size
        self.max_leases = max_leases
        self.leases = 0  # in flight, acknowledged or not (SGLang's ``_occupied``)
        self.leased_bytes = 0
        size = memory_size - data_start
        key = size << _SIZE_SHIFT | data_start
        self._keys = [key]  # free ranges, sorted: best fit is the first key >= size << _SIZE_SHIFT
        self._by_start = {data_start: key}  # start -> key
        self._by_end = {memory_size: data_start}  # end -> start
        self._appended: dict[int, int] = {}  # append counter -> start, for ranges appended since the merge
        self._counter = 0
        self._acked: list[tuple[int, int]] = []  # (start, bytes) waiting for the next tick

    @property
    def usable_bytes(self) -> int:
        return self.memory_size - self.data_start

    @property
    def free_bytes(self) -> int:
        return self.memory_size - self.data_start - self.leased_bytes

    @property
    def largest_free(self) -> int:
        """The largest free range (SGLang does not join ranges between ticks)."""
        return self._keys[-1] >> _SIZE_SHIFT if self._keys else 0

    @property
    def dirty(self) -> bool:
        """Whether the next tick changes anything: acknowledged leases or an unsorted free list."""
        return bool(self._acked or self._appended)

    def free_ranges(self) -> list[tuple[int, int]]:
        """The free ranges ``(start, end)`` in SGLang's list order."""
        ranked = sorted(self._keys, key=lambda k: k & (_APPENDED | _RANK_MASK))
        return [(s, s + (k >> _SIZE_SHIFT)) for k in ranked for s in (self._start(k),)]

    def _start(self, key: int) -> int:
        rank = key & _RANK_MASK
        return self._appended[rank] if key & _APPENDED else rank

    def alloc(self, nbytes: int) -> int:
        """Lease ``nbytes`` (> 0): the byte offset of the lease in the pool, or ``MISS_SPACE``/``MISS_SLOTS``."""
        size = -(-nbytes // DATA_ALIGNMENT) * DATA_ALIGNMENT
        keys = self._keys
        i = bisect_left(keys, size << _SIZE_SHIFT)
        if i == len(keys):
            return MISS_SPACE
        if self.leases >= self.max_leases:
            return MISS_SLOTS
        key = keys.pop(i)
        rank = key & _RANK_MASK
        start = self._appended.pop(rank) if key & _APPENDED else rank
        del self._by_start[start]
        end = start + (key >> _SIZE_SHIFT)
        rest = start + size
        if rest < end:
            counter = self._counter
            self._counter = counter + 1
            rest_key = (end - rest) << _SIZE_SHIFT | _APPENDED | counter
            insort(keys, rest_key)
            self._appended[counter] = rest
            self._by_start[rest] = rest_key
            self._by_end[end] = rest
        else:
            del self._by_end[end]
        self.leases += 1
        self.leased_bytes += size
        return start

    def ack(self, start: int, nbytes: int) -> None:
        """Record that every consumer acknowledged the lease at ``start`` (given back at the next tick)."""
        self._acked.append((start, -(-nbytes // DATA_ALIGNMENT) * DATA_ALIGNMENT))

    def tick(self) -> int:
        """Run one recycler tick; returns the bytes given back."""
        if not self.leases:
            return 0
        keys = self._keys
        by_start = self._by_start
        by_end = self._by_end
        # the merge's sort puts appended ranges in start order like the others
        for start in self._appended.values():
            key = by_start[start]
            del keys[bisect_left(keys, key)]
            key = (key >> _SIZE_SHIFT) << _SIZE_SHIFT | start
            insort(keys, key)
            by_start[start] = key
        self._appended.clear()
        released = 0
        for start, size in self._acked:
            released += size
            end = start + size
            left = by_end.pop(start, None)
            if left is not None:
                del keys[bisect_left(keys, by_start.pop(left))]
                start = left
            right = by_start.pop(end, None)
            if right is not None:
                del keys[bisect_left(keys, right)]
                end += right >> _SIZE_SHIFT
            key = (end - start) << _SIZE_SHIFT | start
            insort(keys, key)
            by_start[start] = key
            by_end[end] = start
        self.leases -= len(self._acked)
        self.leased_bytes -= released
        self._acked.clear()
        return released
