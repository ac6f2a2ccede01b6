"""The writer thread: drains the queue, writes each pool's trace and manifest, feeds the metrics.

Times. SGLang's recycler gives leases back only at its ticks (every ``recycle_interval``, from the
pool's creation, drifting by each tick's own work), and ``mmpool simulate`` ticks at 0, I, 2I, ...
So a pool's trace is written on the tick clock: the k-th tick the pool ran is at exactly k*I, a
lease it gave back is freed at k*I (``"tick": k``), and an allocation between ticks k and k+1 is at
k*I plus its real time since tick k (capped below I, keeping order). A replay at the pool's own
layout then makes every decision the pool made, in its order. A miss has no lifetime; it is freed
at the next tick (``simulate`` ignores the free of a miss). Files are bounded: at ``max_bytes`` a
trace moves to ``.jsonl.1`` (replacing an older one) and a new one starts with the leases in flight.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import sys
import threading
import time
from typing import Any

from mmpool_record import events as ev
from mmpool_record import metrics as _metrics  # here, not in the writer thread: a fork mid-import leaves it half-made
from mmpool_record.config import Config
from mmpool_record.pools import REGISTRY, PoolState

_ENV = ("SGLANG_MM_FEATURE_CACHE_MB", "SGLANG_MM_ITEM_MEM_POOL_RECYCLE_INTERVAL_SEC", "SGLANG_MM_FEATURE_TRANSPORT")
DRAIN_S = 0.02
MANIFEST_S = 1.0


def _release() -> str | None:
    try:
        from importlib.metadata import version

        return version("sglang")
    except Exception:
        return None


def _t(ns: int) -> str:
    return f"{ns // 1_000_000_000}.{ns % 1_000_000_000:09d}"


class PoolFile:
    """One pool's trace file and manifest, and its tick clock."""

    def __init__(self, st: PoolState, config: Config) -> None:
        self.st, self.config = st, config
        self.vmm = st.transport == "cuda_vmm"
        found = dict(st.layout)
        if not found:
            raise ValueError("the pool's layout could not be read")
        base = f"pool-{st.pid}-{st.index}"
        if os.path.exists(os.path.join(config.out_dir, base + ".json")):  # a process id used again
            base = f"{base}-{time.time_ns()}"
        self.base = base
        self.path = os.path.join(config.out_dir, base + ".jsonl")
        self.file = open(self.path, "xb")  # noqa: SIM115 - open for the pool's life
        interval_s = float(found.pop("recycle_interval_s"))
        self.interval: int = max(2, round(interval_s * 1e9))
        self.control = int(found.get("control_bytes", 0))
        transport_name, device = found.pop("transport_name"), found.pop("device")
        from mmpool_record.hook import code_of

        self.info: dict[str, Any] = {
            "format": 1,
            "file": base + ".jsonl",
            "pid": st.pid,
            "pool": st.index,
            "sglang": _release(),
            "code_of": code_of(st.transport),
            "transport": st.transport,
            "transport_name": transport_name,
            "device": device,
            "layout": found,
            "recycle_interval_s": interval_s,
            "env": {k: os.environ[k] for k in _ENV if k in os.environ},
            "t0_monotonic_ns": None,
            "t0_unix_ns": None,
        }
        self.counts = {"allocs": 0, "misses": 0, "releases": 0, "ticks": 0, "rotations": 0}
        self.k, self.rk, self.last = 0, -1, 0
        self.in_tick = False  # between a cuda_ipc tick's TICK and TICK_END
        self.live: dict[int, tuple[Any, str, int, int | None, int]] = {}  # id -> (obj, key, bytes, offset, real t)
        self.leased = 0
        self.misses: list[tuple[str, int, None]] = []  # freed at the next tick
        self.serial = 0
        self.size = 0
        self.lines: list[bytes] = []
        self.metrics: Any = None
        self.dirty = True
        self.manifest_at = 0.0

    def clock(self, r: int) -> int:
        if self.rk < 0:  # the first event: the clock's 0 just before it
            self.rk = r - 1
            self.info["t0_monotonic_ns"] = self.rk
            self.info["t0_unix_ns"] = time.time_ns() - (time.monotonic_ns() - self.rk)
        return self.k * self.interval + min(max(r - self.rk, 1), self.interval - 1)

    def write(self, obj: dict[str, Any], t: int) -> None:
        self.last = max(self.last, t)
        line = f'{{"t": {_t(self.last)}, {json.dumps(obj)[1:]}\n'.encode()  # t as a JSON number, to the ns
        if self.size + len(line) > self.config.max_bytes and self.size:
            self.rotate()
        self.lines.append(line)
        self.size += len(line)

    def rotate(self) -> None:
        self.flush()
        self.file.close()
        os.replace(self.path, self.path + ".1")
        self.file = open(self.path, "xb")  # noqa: SIM115
        self.size = 0
        self.counts["rotations"] += 1
        held = [(key, nbytes, offset) for _, key, nbytes, offset, _ in self.live.values()]
        for key, nbytes, offset in held + self.misses:  # the new file stands alone: its leases in flight
            rest = json.dumps({"op": "alloc", "id": key, "bytes": nbytes, "offset": offset})[1:]
            line = f'{{"t": {_t(self.last)}, {rest}\n'.encode()
            self.lines.append(line)
            self.size += len(line)

    def alloc(self, r: int, requested: int, got: Any) -> None:
        t = self.clock(r)
        key = str(self.serial)
        self.serial += 1
        nbytes = requested - self.control if self.vmm else requested  # cuda_vmm: its data bytes (trace's)
        offset = None if got is None else int(got.start) + self.control
        self.counts["allocs"] += 1
        if got is None:
            self.counts["misses"] += 1
            self.misses.append((key, nbytes, None))
        else:
            self.live[id(got)] = (got, key, nbytes, offset, r)
            self.leased += int(got.end) - int(got.start)
        self.write({"op": "alloc", "id": key, "bytes": nbytes, "offset": offset}, t)
        self.dirty = True
        if self.metrics is not None:
            self.metrics.on_alloc(nbytes, got is not None)

    def release(self, r: int, got: Any, tick: int | None) -> None:
        entry = self.live.pop(id(got), None)
        if entry is None:
            return  # its alloc came before the recording (or was dropped)
        _, key, nbytes, _, r0 = entry
        self.leased -= int(got.end) - int(got.start)
        self.counts["releases"] += 1
        line: dict[str, Any] = {"op": "free", "id": key}
        if tick is not None:
            line["tick"] = tick
        self.write(line, self.k * self.interval if tick is not None else self.clock(r))
        if self.metrics is not None:
            self.metrics.on_release(nbytes, (r - r0) / 1e9)

    def tick(self, r: int, before: tuple[Any, ...], after: tuple[Any, ...]) -> None:
        self.clock(r)
        self.k += 1
        self.rk = r
        self.counts["ticks"] += 1
        for key, _, _ in self.misses:
            self.write({"op": "free", "id": key, "tick": self.k}, self.k * self.interval)
        self.misses.clear()
        if before:  # cuda_vmm frees inline: the chunks the tick held that it no longer holds
            still = {id(c) for c in after}
            for chunk in before:
                if id(chunk) not in still:
                    self.release(r, chunk, self.k)

    def state(self) -> None:
        pool: Any = self.st.pool()
        if self.metrics is None or pool is None:
            return
        if self.vmm:
            largest = max((int(c.end) - int(c.start) for c in list(pool.available_chunks)), default=0)
        else:
            largest = max((end - start for start, end in list(pool._available_ranges)), default=0)
        self.metrics.on_state(self.leased, largest, len(self.live))

    def flush(self) -> None:
        if self.lines:
            self.file.write(b"".join(self.lines))
            self.file.flush()
            self.lines.clear()

    def manifest(self, queue: ev.Queue, final: bool = False) -> None:
        now = time.monotonic()
        if not final and (not self.dirty or now - self.manifest_at < MANIFEST_S):
            return
        self.manifest_at, self.dirty = now, False
        info = dict(self.info, events=dict(self.counts), dropped=queue.dropped, errors=queue.errors)
        info["complete"] = final and queue.dropped == 0
        info["in_flight"] = len(self.live)
        path = os.path.join(self.config.out_dir, self.base + ".json")
        with open(path + ".tmp", "w", encoding="utf-8") as f:
            json.dump(info, f, indent=1)
            f.write("\n")
        os.replace(path + ".tmp", path)


class Writer:
    """This process's writer: a daemon thread that drains the queue every ``DRAIN_S`` seconds."""

    def __init__(self, config: Config, queue: ev.Queue) -> None:
        self.config, self.queue = config, queue
        self.files: dict[int, PoolFile] = {}  # id(PoolState) -> its file
        self.broken: set[int] = set()
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.thread: threading.Thread | None = None
        self.metrics: Any = None
        self.reported = (0, 0)
        self.closed = False

    def start(self) -> None:
        """Start the thread (once), the metrics with it, and the flush at exit."""
        if self.thread is not None:
            return
        self.thread = threading.Thread(target=self._run, name="mmpool-record-writer", daemon=True)
        self.thread.start()
        atexit.register(self.close)
        _exit_drains()
        util = sys.modules.get("multiprocessing.util")  # its children end by os._exit, after its finalizers
        if util is not None:
            try:
                util.Finalize(None, self.close, exitpriority=-100)
            except Exception as e:
                self.queue.error(e)

    def _run(self) -> None:
        try:  # here, not in the allocating thread that started this one: importing prometheus_client takes time
            self.metrics = _metrics.start(self.config)
        except Exception as e:  # metrics off, the recording goes on
            self.queue.error(e)
        while not self.stop.wait(DRAIN_S):
            self.drain()

    def drain(self, final: bool = False) -> None:
        """Write every queued event; never raises."""
        if not self.lock.acquire(timeout=5.0 if final else -1):
            return
        try:
            self._events()
            for pf in list(self.files.values()):
                try:
                    pf.flush()
                    pf.state()
                    pf.manifest(self.queue, final)
                except Exception as e:
                    self.queue.error(e)
            self._health()
        except Exception as e:
            self.queue.error(e)
        finally:
            self.lock.release()

    def _events(self) -> None:
        items = self.queue.items
        for _ in range(len(items)):
            event = items.popleft()
            st = None
            try:
                st = REGISTRY.state(event[1], "cuda_vmm" if event[0] & ev.VMM else "cuda_ipc")
                self._handle(st, event)
            except Exception as e:
                if st is not None:
                    self.broken.add(id(st))
                self.queue.error(e)

    def _handle(self, st: PoolState, event: tuple[Any, ...]) -> None:
        kind, r = event[0], event[2]
        if id(st) in self.broken:
            return
        pf = self.files.get(id(st))
        if pf is None:
            pf = self.files[id(st)] = PoolFile(st, self.config)
            if self.metrics is not None:
                labels = {
                    "pool": str(st.index),
                    "pid": str(st.pid),
                    "transport": st.transport,
                    "gpu": str(pf.info["device"]),
                }
                pf.metrics = self.metrics.pool(labels, pf.info["layout"]["memory_size"])
        op = kind & ~ev.VMM
        if op == ev.ALLOC:
            pf.alloc(r, event[3], event[4])
        elif op == ev.RELEASE:
            pf.release(r, event[3], pf.k if pf.in_tick else None)
        elif op == ev.TICK:
            pf.tick(r, event[3], event[4])
            pf.in_tick = not pf.vmm  # a cuda_ipc tick's releases follow it, up to its TICK_END
        else:
            pf.in_tick = False

    def _health(self) -> None:
        if self.metrics is None:
            return
        dropped, errors = self.queue.dropped, self.queue.errors
        seen_dropped, seen_errors = self.reported
        if dropped > seen_dropped:
            self.metrics.dropped(dropped - seen_dropped)
        if errors > seen_errors:
            self.metrics.hook_error(errors - seen_errors)
        self.reported = (dropped, errors)

    def close(self) -> None:
        """The last drain, the manifests marked final, the files closed; at exit, never raises."""
        if self.closed:
            return
        self.closed = True
        self.stop.set()
        self.drain(final=True)
        for pf in self.files.values():
            with contextlib.suppress(Exception):
                pf.file.close()
        if self.queue.dropped:
            with contextlib.suppress(Exception):
                sys.stderr.write(
                    f"mmpool record: {self.queue.dropped} events dropped (the buffer of {self.queue.capacity} was "
                    f"full); this process's trace is incomplete, its pool-*.json say so\n"
                )


_writer: dict[str, Writer | None] = {"w": None}


def _exit_drains() -> None:
    """``os._exit`` (a forked child's way out, skipping atexit) writes this process's last events first."""
    real = getattr(os._exit, "__wrapped__", os._exit)

    def _exit(status: int) -> None:
        w = _writer["w"]
        if w is not None and w.thread is not None:
            with contextlib.suppress(BaseException):
                w.close()
        real(status)

    _exit.__wrapped__ = real  # type: ignore[attr-defined]
    os._exit = _exit  # type: ignore[assignment]


def setup(config: Config) -> None:
    """Make this process's writer; it starts at the first event (``Queue.on_first``)."""
    os.makedirs(config.out_dir, exist_ok=True)
    ev.QUEUE.capacity = config.buffer
    w = _writer["w"] = Writer(config, ev.QUEUE)
    ev.QUEUE.on_first = w.start  # this process's first event, in the allocating thread


def current() -> Writer | None:
    """This process's writer (tests and benchmarks drain it by hand)."""
    return _writer["w"]


def after_fork() -> None:
    """In a forked child: a queue, registry and writer of its own (the parent's thread is not here)."""
    old = _writer["w"]
    ev.QUEUE.reset()
    REGISTRY.__init__()  # type: ignore[misc]
    if old is not None:
        setup(old.config)
