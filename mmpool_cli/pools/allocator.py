"""What the simulator needs of a pool allocator, so that each allocator is a file of its own.

An allocator models one tokenizer worker's pool (``cuda_ipc.Pool``; ``cuda_vmm`` packs a request's
features into chunks it takes from the same best-fit free list); its rules come from the engine
release being simulated (``PoolRules``), never from constants here.
Neutral: knows no engine; standard library only.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

MISS_SPACE = -1  # no free range holds the feature
MISS_SLOTS = -2  # a range holds it, but all in-flight slots are taken


@dataclass(frozen=True)
class PoolRules:
    """One release's allocation rules for a pool: which allocator, its slice alignment and slot cap."""

    allocator: str  # a key of ``replay.allocator_for``'s table
    alignment: int  # bytes; a power of two
    max_leases: int  # leases in flight at most
    control_bytes: int = 0  # cuda_vmm: the ack words in front of each chunk


class Allocator(Protocol):
    """One worker's pool as the replay drives it (``simulate.replay``).

    ``acked`` holds the leases ``(anything, start, nbytes, time leased)`` acknowledged since the
    last tick; ``tick`` gives them back and returns the bytes it released.
    """

    leases: int
    leased_bytes: int
    area: int
    slack: int  # how many bytes larger the pool could be with every decision unchanged (exclusive)
    acked: list[tuple[int, int, int, int]]

    @property
    def usable_bytes(self) -> int: ...

    @property
    def largest_free(self) -> int: ...

    def alloc(self, nbytes: int) -> int:
        """A lease's offset in the pool, or ``MISS_SPACE``/``MISS_SLOTS``."""
        ...

    def tick(self, now: int = 0) -> int: ...


class AllocatorFactory(Protocol):
    def __call__(self, memory_size: int, data_start: int, rules: PoolRules) -> Allocator: ...
