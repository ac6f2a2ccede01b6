"""One tokenizer worker's cuda_ipc feature pool, allocating as SGLang's stream-ordered pool does.

The rules (``StreamOrderedMmFeaturePool`` in ``multimodal/transport/memory_pool.py``):

* a feature of ``nbytes`` takes ``align_up(nbytes, alignment)`` bytes (the release's ``DATA_ALIGNMENT``);
* best fit: the smallest free range that holds it, and among ranges of that size the one
  earliest in SGLang's free list; the rest of the range is appended to the end of the list;
* at most ``max_leases`` leases are in flight (the release's ``DEFAULT_MAX_INFLIGHT_SLICES``); with
  none left the feature misses even if it would fit;
* a miss sends that feature over the CPU path (SGLang returns no lease; nothing waits);
* a lease whose consumers have all acknowledged it is given back at the recycler's next tick.
  A tick that finds at least one lease in flight gives back every acknowledged lease, then
  sorts the free list by start and joins touching ranges; a tick with none in flight does nothing.
  (That skip never changes a decision: a pool empties only at a tick that merged its list.)

SGLang scans its whole list on each allocation. Here the free ranges live in a list of integer
keys ``size << 44 | start``, sorted, so best fit is one bisection. SGLang's list position only
matters between ranges of equal size, and it needs no bookkeeping until then: after a tick's merge
the list is in start order, so a range present at the last merge ranks by its start, and one
appended since ranks after all of those, in append order (``_appended``).
"""

from __future__ import annotations

from bisect import bisect_left, insort

from mmpool_cli.pools.allocator import MISS_SLOTS, MISS_SPACE, PoolRules
from mmpool_cli.traces.events import MAX_POOL_BYTES

_SHIFT = 44  # key = size << _SHIFT | start
_START = (1 << _SHIFT) - 1
assert MAX_POOL_BYTES == 1 << _SHIFT  # starts must fit below the size

__all__ = ["MAX_POOL_BYTES", "MISS_SLOTS", "MISS_SPACE", "Pool", "UnboundedPool"]


class Pool:
    """The free ranges, in-flight leases and acknowledgements of one worker's pool.

    ``memory_size`` is the worker's share of the budget and ``data_start`` the control header
    before the data region (``ipc_header_bytes``); both as SGLang computes them. ``acked`` holds
    the leases ``(anything, start, nbytes, time leased)`` acknowledged since the last tick.
    """

    __slots__ = (
        "data_start",
        "memory_size",
        "max_leases",
        "_round",
        "_trunc",
        "leases",
        "leased_bytes",
        "acked",
        "area",
        "_keys",
        "_by_start",
        "_by_end",
        "_appended",
        "_counter",
        "slack",
    )

    def __init__(self, memory_size: int, data_start: int, rules: PoolRules) -> None:
        if not 0 <= data_start < memory_size <= MAX_POOL_BYTES:
            raise ValueError(f"pool of {memory_size} bytes cannot hold a {data_start}-byte header")
        if rules.max_leases <= 0:
            raise ValueError("max_leases must be positive")
        if rules.alignment <= 0 or rules.alignment & (rules.alignment - 1):
            raise ValueError("the alignment must be a power of two")
        self.data_start = data_start
        self.memory_size = memory_size
        self.max_leases = rules.max_leases
        # a power of two: (n + _round) & _trunc rounds n up to it
        self._round = rules.alignment - 1
        self._trunc = -rules.alignment
        self.leases = 0  # in flight, acknowledged or not (SGLang's ``_occupied``)
        self.leased_bytes = 0
        self.acked: list[tuple[int, int, int, int]] = []
        self.area = 0  # bytes x nanoseconds of the leases given back so far
        key = (memory_size - data_start) << _SHIFT | data_start
        self._keys = [key]  # free ranges, sorted: best fit is the first key >= size << _SHIFT
        self._by_start = {data_start: key}  # start -> key
        self._by_end = {memory_size: data_start}  # end -> start
        self._appended: dict[int, int] = {}  # start -> append counter, for ranges appended since the merge
        self._counter = 0
        # how many bytes more at the end of the pool would leave every decision so far unchanged
        # (exclusive): a larger pool differs only in its last free range, the one ending at
        # ``memory_size``, and only a decision that range took part in could go another way
        self.slack = MAX_POOL_BYTES

    @property
    def usable_bytes(self) -> int:
        return self.memory_size - self.data_start

    @property
    def free_bytes(self) -> int:
        return self.memory_size - self.data_start - self.leased_bytes

    @property
    def largest_free(self) -> int:
        """The largest free range (SGLang does not join ranges between ticks)."""
        return self._keys[-1] >> _SHIFT if self._keys else 0

    @property
    def dirty(self) -> bool:
        """Whether the next tick changes anything: acknowledged leases or an unsorted free list."""
        return bool(self.acked or self._appended)

    def free_ranges(self) -> list[tuple[int, int]]:
        """The free ranges ``(start, end)`` in SGLang's list order."""
        appended = self._appended
        starts = sorted((k & _START for k in self._keys), key=lambda s: (s in appended, appended.get(s, s)))
        return [(s, s + (self._by_start[s] >> _SHIFT)) for s in starts]

    def alloc(self, nbytes: int) -> int:
        """Lease ``nbytes`` (> 0): the byte offset of the lease in the pool, or ``MISS_SPACE``/``MISS_SLOTS``."""
        size = (nbytes + self._round) & self._trunc
        keys = self._keys
        i = bisect_left(keys, size << _SHIFT)
        n = len(keys)
        if i == n:
            tail = self._by_end.get(self.memory_size)
            if tail is not None:  # a last range grown by ``size - its size`` would hold it
                self._limit(size - (self.memory_size - tail))
            return MISS_SPACE
        if self.leases >= self.max_leases:
            return MISS_SLOTS
        key = keys[i]
        found = key >> _SHIFT
        appended = self._appended
        if i + 1 < n and keys[i + 1] >> _SHIFT == found:
            i = self._earliest(i, found)  # ranges of equal size: SGLang takes the earliest in its list
            key = keys[i]
        del keys[i]
        start = key & _START
        if appended:
            appended.pop(start, None)
        del self._by_start[start]
        end = start + found
        if end == self.memory_size:
            self._took_last(keys, i, found, size)
        else:
            tail = self._by_end.get(self.memory_size)
            if tail is not None and self.memory_size - tail < size:
                self._limit(size - (self.memory_size - tail))  # a grown last range would fit, and win
        rest = start + size
        if rest < end:
            rest_key = (end - rest) << _SHIFT | rest
            insort(keys, rest_key)
            appended[rest] = self._counter
            self._counter += 1
            self._by_start[rest] = rest_key
            self._by_end[end] = rest
        else:
            del self._by_end[end]
        self.leases += 1
        self.leased_bytes += size
        return start

    def _limit(self, slack: int) -> None:
        if slack < self.slack:
            self.slack = slack

    def _took_last(self, keys: list[int], i: int, found: int, size: int) -> None:
        """The last range held the lease (its key already removed, at ``i``): how much larger it may be."""
        # any other range that fits would win over a larger last range once the last is larger
        # than it: the smallest other fitting range bounds the growth (equal size: no growth)
        if (i and keys[i - 1] >> _SHIFT == found) or (i < len(keys) and keys[i] >> _SHIFT == found):
            self._limit(0)
        elif i < len(keys):
            self._limit((keys[i] >> _SHIFT) - found)
        if found == size:
            # taken whole: a larger pool keeps a remnant, harmless while it is too small for any lease
            self._limit(self._round + 1)

    def _earliest(self, i: int, size: int) -> int:
        """Among the equal-size keys from ``i``, the one earliest in SGLang's list."""
        keys = self._keys
        appended = self._appended
        best = i
        j = i
        while j < len(keys) and keys[j] >> _SHIFT == size:
            start = keys[j] & _START
            if start not in appended:
                return j  # present at the last merge, and keys are in start order: first in the list
            if appended[start] < appended[keys[best] & _START]:
                best = j
            j += 1
        return best

    def ack(self, start: int, nbytes: int, leased_at: int = 0) -> None:
        """Record that every consumer acknowledged the lease at ``start`` (given back at the next tick)."""
        self.acked.append((0, start, nbytes, leased_at))

    def tick(self, now: int = 0) -> int:
        """Run one recycler tick at time ``now``; returns the bytes given back."""
        if not self.leases:
            return 0
        # the merge's sort puts every range in start order: none ranks as appended any more
        self._appended.clear()
        keys = self._keys
        by_start = self._by_start
        by_end = self._by_end
        released = 0
        area = 0
        for _, start, nbytes, leased_at in self.acked:
            size = (nbytes + self._round) & self._trunc
            released += size
            area += size * (now - leased_at)
            end = start + size
            left = by_end.pop(start, None)
            if left is not None:
                del keys[bisect_left(keys, by_start.pop(left))]
                start = left
            right = by_start.pop(end, None)
            if right is not None:
                del keys[bisect_left(keys, right)]
                end += right >> _SHIFT
            key = (end - start) << _SHIFT | start
            insort(keys, key)
            by_start[start] = key
            by_end[end] = start
        self.leases -= len(self.acked)
        self.leased_bytes -= released
        self.area += area
        self.acked.clear()
        return released


class UnboundedPool(Pool):
    """A pool as large as starts allow: the run every large enough pool makes, and how large is enough.

    ``enough`` is the smallest ``memory_size`` whose run decides every alloc as this one does:
    the last range (which here always holds the lease) must hold every lease it gave, and must
    stay larger than every other range best fit chose instead of it.
    """

    __slots__ = ("enough",)

    def __init__(self, memory_size: int, data_start: int, rules: PoolRules) -> None:
        super().__init__(MAX_POOL_BYTES - 1, data_start, rules)
        self.enough = data_start + 1

    def alloc(self, nbytes: int) -> int:
        size = (nbytes + self._round) & self._trunc
        keys = self._keys
        last = self._by_end[self.memory_size]  # the last range's start: it holds any lease here
        found = keys[bisect_left(keys, size << _SHIFT)]
        if found & _START == last:
            end = last + size  # taken from the last range: a pool must reach past it
        else:
            end = last + (found >> _SHIFT) + 1  # a last range this large still loses to the one chosen
        if end > self.enough:
            self.enough = end
        return super().alloc(nbytes)
