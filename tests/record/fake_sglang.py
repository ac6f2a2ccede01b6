"""A small stand-in for SGLang's cuda_ipc pool, for the hook's mechanics (not SGLang's code).

``tree(dir)`` writes a package ``sglang`` whose ``memory_pool`` has a ``StreamOrderedMmFeaturePool``
with the methods the hook checks: a first-fit pool without a GPU, its consumers' acknowledgements a
set. Its digests are not in mmpool's ``digests.json``: as it stands the hook must leave it alone;
``digests(dir)`` writes an extra digests file (``MMPOOL_RECORD_DIGESTS``) that makes it known.
``PROGRAM`` drives it and prints every decision, so a run with and without the hook can be compared.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

RECORD_DIR = Path(__file__).resolve().parents[2] / "mmpool_cli" / "_record"
MODULE = "sglang.srt.multimodal.transport.memory_pool"

POOL = """
import threading
from dataclasses import dataclass


@dataclass(frozen=True)
class PoolLease:
    start: int
    end: int
    nbytes: int
    slot: int


class StreamOrderedMmFeaturePool:
    def __init__(self, *, memory_size, consumer_count=1, recycle_interval=0.05, data_start=256):
        self.memory_size = memory_size
        self.data_start = data_start
        self.consumer_count = consumer_count
        self.max_inflight_slices = 64
        self.transport_name = "CUDA IPC"
        self.device_id = 0
        self._recycle_interval = recycle_interval
        self._available_ranges = [(data_start, memory_size)]
        self._available_slots = list(reversed(range(64)))
        self._occupied = {}
        self._acked = set()
        self._lock = threading.Lock()

    def _allocate_locked(self, nbytes):
        size = (nbytes + 255) // 256 * 256
        for index, (start, end) in enumerate(self._available_ranges):
            if end - start >= size and self._available_slots:
                self._available_ranges.pop(index)
                if start + size < end:
                    self._available_ranges.append((start + size, end))
                lease = PoolLease(start, start + size, nbytes, self._available_slots.pop())
                self._occupied[lease.slot] = lease
                return lease
        return None

    def _release_locked(self, lease):
        del self._occupied[lease.slot]
        self._available_slots.append(lease.slot)
        self._available_ranges.append((lease.start, lease.end))

    def _merge_ranges_locked(self):
        merged = []
        for start, end in sorted(self._available_ranges):
            if merged and merged[-1][1] == start:
                merged[-1] = (merged[-1][0], end)
            else:
                merged.append((start, end))
        self._available_ranges = merged

    def _recycle_ready_leases_locked(self):
        if not self._occupied:
            return
        for lease in list(self._occupied.values()):
            if lease.slot in self._acked:
                self._acked.discard(lease.slot)
                self._release_locked(lease)
        self._merge_ranges_locked()

    def _recycle_loop(self):
        pass

    def copy_tensor(self, nbytes):
        with self._lock:
            return self._allocate_locked(nbytes)

    def cancel_lease(self, lease):
        self._acked.add(lease.slot)
"""

# drives one pool in this process (and, with an argument, in a forked and a spawned child too)
PROGRAM = """
import multiprocessing
import os
import sys
import time

from sglang.srt.multimodal.transport.memory_pool import StreamOrderedMmFeaturePool


def drive(name, items):
    pool = StreamOrderedMmFeaturePool(memory_size=1 << 20)
    held = []
    out = []
    for i in range(items):
        if i == 1 and os.environ.get("SABOTAGE"):  # after the first event opened the recording
            import mmpool_record.recorder

            mmpool_record.recorder.RECORDER.limit = None  # the hook's own state broken: its wrappers must not mind
        lease = pool.copy_tensor(1000 + (i * 7919) % 90000)
        out.append("miss" if lease is None else str(lease.start))
        if lease is not None:
            held.append(lease)
        if i % 5 == 4:
            for lease in held[:3]:
                pool.cancel_lease(lease)
            held = held[3:]
            with pool._lock:
                pool._recycle_ready_leases_locked()
            if os.environ.get("PAUSE"):  # a run longer than the writer's drains (rotation happens at them)
                time.sleep(float(os.environ["PAUSE"]))
    print(name, " ".join(out), flush=True)


if __name__ == "__main__":
    items = int(sys.argv[1])
    drive("main", items)
    if len(sys.argv) > 2:
        pid = os.fork()
        if pid == 0:
            drive("forked", items)
            os._exit(0)
        os.waitpid(pid, 0)
        child = multiprocessing.get_context("spawn").Process(target=drive, args=("spawned", items))
        child.start()
        child.join()
    sys.exit(3)
"""


def tree(root: Path) -> Path:
    """A package ``sglang`` with the stand-in pool under ``root``; returns ``root``."""
    package = root / "sglang" / "srt" / "multimodal" / "transport"
    package.mkdir(parents=True)
    for folder in (package, *package.parents):
        if folder == root:
            break
        (folder / "__init__.py").write_text("")
    (package / "memory_pool.py").write_text(POOL)
    (root / "program.py").write_text(PROGRAM)
    return root


def digests(root: Path) -> Path:
    """An extra digests file that makes the stand-in's methods known (as for a reviewed patched build)."""
    sys.path.insert(0, str(RECORD_DIR))
    try:
        from mmpool_record.digest import module_digests
    finally:
        sys.path.remove(str(RECORD_DIR))
    found = module_digests(POOL, MODULE)
    path = root / "digests.json"
    path.write_text(json.dumps({"format": 1, "modules": {MODULE: {k: {v: ["stand-in"]} for k, v in found.items()}}}))
    return path
