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
from collections import deque
from collections.abc import Callable
from typing import Any

from mmpool_record.config import DEFAULT_BUFFER

# event kinds: (kind, pool, monotonic ns, ...); a cuda_vmm pool's kinds carry VMM
ALLOC = 1  # (ALLOC, pool, t, nbytes, result): result a lease/chunk, or None for a miss
RELEASE = 2  # (RELEASE, pool, t, lease or chunk)
TICK = 3  # (TICK, pool, t, before, after): before/after the occupied chunks (cuda_vmm), else ()
TICK_END = 4  # (TICK_END, pool, t): the cuda_ipc tick that TICK began is over
VMM = 8


class Queue:
    """A bounded queue of events with counted drops and counted hook errors.

    ``limit`` is what the wrappers compare the length with: 0 until this process's first event,
    which therefore takes ``overflow``, opens the queue to ``capacity`` and starts the writer
    (``on_first``). A forked child's queue is closed again (``reset``).
    """

    def __init__(self, capacity: int = DEFAULT_BUFFER) -> None:
        self.capacity = capacity
        self.limit = 0
        self.opened = False
        self.items: deque[tuple[Any, ...]] = deque()
        self.dropped = 0
        self.errors = 0
        self.on_first: Callable[[], None] | None = None
        self._error_said = False
        self._lock = threading.Lock()
        self.wake = threading.Event()

    def overflow(self, event: tuple[Any, ...]) -> None:
        """The way of an event that found the queue at its limit: the first one opens it, the rest drop."""
        if not self.opened:
            with self._lock:
                if not self.opened:
                    self.opened, self.limit = True, self.capacity
                    start = self.on_first
                    if start is not None:
                        start()
        if len(self.items) < self.limit:  # again: another thread may have opened it since this one looked
            self.items.append(event)
            return
        self.dropped += 1

    def reset(self) -> None:
        """Empty and closed, nothing counted: a forked child's queue (the parent's events are not its)."""
        self.items.clear()
        self.dropped = self.errors = 0
        self.opened, self.limit = False, 0
        self._lock = threading.Lock()  # the parent's may have been held at the fork

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


def put(event: tuple[Any, ...], q: Queue = QUEUE) -> None:
    """Queue ``event`` for the writer, or count it dropped when the queue is full; never waits."""
    if len(q.items) < q.limit:
        q.items.append(event)
    else:
        q.overflow(event)
