"""A ring buffer of objects freed oldest first, driven a batch at a time: its hits at one size.

One writer stores each object as a chunk (an 8-byte header, then the object) at the ring's end,
wrapping to the start where a chunk would cross the end; when a chunk does not fit, it reclaims
from the oldest object on (at most twice the largest object's bytes), stopping at the first one
still held, and tries once more; an object larger than the largest allowed is not stored. A batch
(a request's items) holds the objects it finds before it looks any up, and every object it looks
up or stores, until it ends: the readers have read everything before the next batch. vLLM's shm
processor cache (``SingleWriterShmRingBuffer``, ``SingleWriterShmObjectStorage``) is one.

A ring is no stack algorithm (a larger ring can hit less, and wrap-around wastes a size-dependent
tail), so each size is its own replay: ``replay`` here (the reference), ``replay_dense`` compiled
(``kernels/_cachereplay.c``'s ``ring``, kept equal by ``tests/engines/vllm/test_processor_replay.py``).

Neutral: knows no engine; standard library only.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from mmpool_cli.caches.lru import FAST, Batches

ID_MAX = 1 << 31  # the ring's monotonic ids wrap here
RING_CHUNK_HEADER = 8  # [4-byte id][4-byte size] before each chunk


class Ring:
    """The writer's ring buffer and its index of objects by key; ``held`` ids are not reclaimable."""

    def __init__(self, capacity: int, max_object: int) -> None:
        self.size = capacity
        self.max_object = max_object
        self.start = self.end = 0  # data_buffer_start / data_buffer_end (end may exceed size)
        self.id_start = self.id_end = 0
        self.address: dict[int, int] = {}  # id -> address
        self.chunk: dict[int, int] = {}  # id -> chunk size, header included
        self.keys: dict[str, int] = {}  # key -> id
        self.id_key: dict[int, str] = {}
        self.held: set[int] = set()  # read pending or touched: not reclaimable

    def allocate(self, chunk: int) -> int | None:
        reset = self.end % self.size
        reset = (self.end // self.size + 1) * self.size if reset + chunk > self.size else self.end
        if reset + chunk - self.start > self.size:
            return None
        self.end = reset
        ident = self.id_end
        self.address[ident % ID_MAX] = self.end
        self.chunk[ident % ID_MAX] = chunk
        self.end += chunk
        self.id_end = (self.id_end + 1) % ID_MAX
        return ident

    def free_unused(self) -> None:
        freed = 0
        while self.id_start in self.address and freed < 2 * self.max_object:
            ident = self.id_start
            if ident in self.held:
                break
            del self.address[ident]
            freed += self.chunk.pop(ident)
            del self.keys[self.id_key.pop(ident)]
            self.id_start = (ident + 1) % ID_MAX
            if self.id_start in self.address:
                self.start += (self.address[self.id_start] - self.start) % self.size
            else:
                self.start = self.end = 0
        if self.start >= self.size:
            self.start -= self.size
            self.end -= self.size

    def put(self, key: str, object_bytes: int) -> bool:
        """Store an object of ``object_bytes`` (flag, metadata and data): whether it was stored."""
        if object_bytes > self.max_object:
            return False
        chunk = object_bytes + RING_CHUNK_HEADER
        ident = self.allocate(chunk)
        if ident is None:
            self.free_unused()
            ident = self.allocate(chunk)
            if ident is None:
                return False
        self.keys[key] = ident
        self.id_key[ident] = key
        self.held.add(ident)
        return True


def replay(
    batches: Sequence[Sequence[str]],
    sizes: Mapping[str, int],
    work: Mapping[str, int],
    capacity: int,
    max_object: int,
    *,
    flags: bool = False,
) -> tuple[int, int, int, list[str]]:
    """``(hits, lookups, work saved, marks)`` of ``batches`` through a ring of ``capacity`` bytes;
    ``sizes[k]`` is each object's bytes (its chunk less the header), ``flags`` keeps each batch's H/M
    letters (H: held when the batch came)."""
    hits = lookups = saved = 0
    marks: list[str] = []
    ring = Ring(capacity, max_object)
    for keys in batches:
        if flags:
            marks.append("".join("H" if k in ring.keys else "M" for k in keys))
        ring.held = {ring.keys[k] for k in keys if k in ring.keys}
        for k in keys:
            lookups += 1
            if k in ring.keys:
                hits += 1
                saved += work[k]
                ring.held.add(ring.keys[k])  # looked up: held until the batch ends
            else:
                ring.put(k, sizes[k])
        ring.held = set()  # the batch ended: its objects are released
    return hits, lookups, saved, marks


def replay_dense(b: Batches, capacity: int, max_object: int) -> tuple[int, int, int]:
    """``replay``'s ``(hits, lookups, work saved)``, compiled, of batches made dense once for many sizes."""
    if FAST is None:
        raise RuntimeError("the compiled cache replay is not built")
    hits, lookups, saved = FAST.ring(b.keys, b.starts, b.sizes, b.work, capacity, max_object)
    return int(hits), int(lookups), int(saved)
