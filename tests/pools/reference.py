"""A straightforward model of SGLang 0.5.23's cuda_ipc pool, to check the fast one against.

It keeps SGLang's data structures as they are (a free list scanned on every allocation, a slot
stack, a dict of leases) and runs every recycler tick in turn, with no shortcuts.
"""

from __future__ import annotations

ALIGN = 256


class ReferencePool:
    def __init__(self, memory_size: int, data_start: int, max_slots: int = 4096) -> None:
        self.ranges = [(data_start, memory_size)]
        self.slots = list(reversed(range(max_slots)))
        self.occupied: dict[int, list] = {}  # slot -> [start, end, acknowledged]

    def alloc(self, nbytes: int) -> tuple[int, int] | None:
        size = (nbytes + ALIGN - 1) // ALIGN * ALIGN
        candidates = [(end - start, i, start, end) for i, (start, end) in enumerate(self.ranges) if end - start >= size]
        if not candidates or not self.slots:
            return None
        _, i, start, end = min(candidates)
        self.ranges.pop(i)
        if start + size < end:
            self.ranges.append((start + size, end))
        slot = self.slots.pop()
        self.occupied[slot] = [start, start + size, False]
        return slot, start

    def ack(self, slot: int) -> None:
        self.occupied[slot][2] = True

    def tick(self) -> None:
        if not self.occupied:
            return
        for slot, (start, end, acknowledged) in list(self.occupied.items()):
            if acknowledged:
                del self.occupied[slot]
                self.slots.append(slot)
                self.ranges.append((start, end))
        merged: list[tuple[int, int]] = []
        for start, end in sorted(self.ranges):
            if merged and merged[-1][1] == start:
                merged[-1] = (merged[-1][0], end)
            else:
                merged.append((start, end))
        self.ranges = merged


def reference_offsets(events, workers: int, memory_size: int, data_start: int, interval: int, max_slots: int = 4096):
    """The offset (None on a miss) of every alloc event, ticking every pool at 0, I, 2I, ..."""
    pools = [ReferencePool(memory_size, data_start, max_slots) for _ in range(workers)]
    live: dict = {}
    offsets = []
    next_tick = 0
    for t, op, key, nbytes, worker in events:
        while next_tick < t:  # a tick at T runs after every event stamped at or before T
            for pool in pools:
                pool.tick()
            next_tick += interval
        if op == 0:
            got = pools[worker].alloc(nbytes)
            offsets.append(None if got is None else got[1])
            live[key] = None if got is None else (worker, got[0])
        else:
            lease = live.pop(key)
            if lease is not None:
                pools[lease[0]].ack(lease[1])
    return offsets
