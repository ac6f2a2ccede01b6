"""A trace file not read yet: read whole where the simulation needs its events (a budget search, a
picture), or replayed as it is read where one replay is all it needs.

Replayed as it is read, a trace costs the memory of the leases in flight, not of its events (about
40 bytes an event read whole: 4 GB for 10^8), and no pass over columns in between; its events, their
errors and the result are those of reading it whole and replaying it. That takes the compiled
simulator, cuda_ipc's pools and a regular file (read again to tell a free of an id freed before from
one of an id never allocated, where the reader keeps only the ids in flight); anything else, stdin
and FIFOs included, is read whole first, with the same result.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass

from mmpool_cli.kernels import native
from mmpool_cli.pools.replay import native_result, simulate
from mmpool_cli.pools.results import PoolLayout, SimResult
from mmpool_cli.traces.bounded import IDLE_TIMEOUT_S
from mmpool_cli.traces.events import Events
from mmpool_cli.traces.parquet import is_parquet, replay_parquet
from mmpool_cli.traces.reader import read_trace, replay_lines


@dataclass(frozen=True)
class TraceFile:
    """The trace at ``path``, read as ``read_trace`` reads it (for ``workers`` pools, ...) when used."""

    path: str
    workers: int
    max_events: int
    idle_timeout: float = IDLE_TIMEOUT_S
    keep_ids: bool = False
    requests: bool = False

    def read(self) -> Events:
        """Its events, read whole and checked."""
        return read_trace(
            self.path,
            self.workers,
            max_events=self.max_events,
            idle_timeout=self.idle_timeout,
            keep_ids=self.keep_ids,
            requests=self.requests,
        )

    def streams(self, layout: PoolLayout) -> bool:
        """Whether ``replay(layout)`` replays it as it reads it."""
        if native.FAST is None or layout.transport != "cuda_ipc" or self.keep_ids or self.requests:
            return False
        try:
            return stat.S_ISREG(os.stat(self.path).st_mode)
        except (OSError, ValueError):
            return False  # read() says what is wrong with it

    def replay(self, layout: PoolLayout) -> SimResult:
        """``simulate(self.read(), layout)``, in one pass over the file where it can be."""
        if not self.streams(layout):
            return simulate(self.read(), layout)
        params = (layout.memory_size, layout.data_start, layout.recycle_ns, layout.rules.alignment, layout.max_leases)
        if is_parquet(self.path):
            answer = replay_parquet(self.path, layout.workers, params, max_events=self.max_events)
        else:
            answer = replay_lines(
                self.path, layout.workers, params, max_events=self.max_events, idle_timeout=self.idle_timeout
            )
        return native_result(layout, answer)
