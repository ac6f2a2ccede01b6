"""The one thing the allocating thread does: put a tuple on a bounded queue, or count a drop.

``collections.deque(maxlen=...)`` would drop the *oldest* event silently; the recording must drop
the newest and count it, so the length is checked before the append. ``deque.append`` and
``popleft`` are atomic in CPython, so the writer thread drains without a lock of its own.
Every event is taken under the pool's own lock (SGLang's allocator and recycler hold it), so the
queue's order is the pool's order.
"""

from __future__ import annotations

import contextlib
import sys
import threading
import time
from collections import deque
from typing import Any

from mmpool_record.config import DEFAULT_BUFFER

# event kinds: (kind, pool state, monotonic ns, ...)
ALLOC = 1  # (ALLOC, state, t, nbytes, result): result a lease/chunk, or None for a miss
RELEASE = 2  # (RELEASE, state, t, lease or chunk, in_tick)
TICK = 3  # (TICK, state, t, before, after): before/after the occupied chunks (cuda_vmm), else ()


class Queue:
    """A bounded queue of events with counted drops and counted hook errors."""

    def __init__(self, capacity: int = DEFAULT_BUFFER) -> None:
        self.capacity = capacity
        self.items: deque[tuple[Any, ...]] = deque()
        self.dropped = 0
        self.errors = 0
        self._error_said = False
        self.wake = threading.Event()

    def error(self, e: BaseException) -> None:
        """Count a failure of the hook's own code; say the first one, once, on stderr."""
        self.errors += 1
        if not self._error_said:
            self._error_said = True
            with contextlib.suppress(Exception):
                sys.stderr.write(
                    f"mmpool record: the hook failed ({type(e).__name__}: {e}); the program is unaffected, "
                    "further failures are counted in the recording's pool-*.json\n"
                )


QUEUE = Queue()
now = time.monotonic_ns


def put(event: tuple[Any, ...], q: Queue = QUEUE) -> None:
    """Queue ``event`` for the writer, or count it dropped when the queue is full; never waits."""
    items = q.items
    if len(items) < q.capacity:
        items.append(event)
    else:
        q.dropped += 1
