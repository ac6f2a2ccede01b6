"""What the replay needs of one worker's pool: the allocator protocol every transport's pool follows.

``pool.Pool`` is SGLang's cuda_ipc allocator; ``vmm`` uses the same best-fit free list for the
cuda_vmm pool (chunks with their control words in front, no slot cap) and packs a request's
features above it. The engine only calls what is declared here.
"""

from __future__ import annotations

from typing import Protocol


class Allocator(Protocol):
    """One worker's pool: leases handed out by best fit, given back at the recycler's ticks."""

    leases: int  # in flight, acknowledged or not
    leased_bytes: int
    area: int  # bytes x nanoseconds of the leases given back so far
    slack: int  # how many bytes larger the pool could be with every decision unchanged (exclusive)
    acked: list[tuple[int, int, int, int]]  # (anything, start, nbytes, time leased) since the last tick

    @property
    def largest_free(self) -> int: ...

    def alloc(self, nbytes: int) -> int:
        """The byte offset of a lease of ``nbytes``, or a negative miss code."""
        ...

    def tick(self, now: int = 0) -> int:
        """One recycler tick: give back the acknowledged leases and join free ranges; the bytes given back."""
        ...
