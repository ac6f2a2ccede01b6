"""The process ``mmpool record`` leaves beside the command: it reads the recording as it grows and serves its metrics.

The hook only writes (``recorder.py``); this process, forked by ``mmpool record`` before it execs the
command and ending with it, reads every stream's new records every ``POLL_S`` seconds and keeps each
pool's series (``metrics.py``): into the server's ``PROMETHEUS_MULTIPROC_DIR`` when the pool's
process had one (SGLang's ``--enable-metrics``: its own ``/metrics`` shows them), else into the
recording's ``metrics.d``; with ``--metrics-port`` it serves them (``metrics_serve.py``). So the
server's processes never import prometheus_client for mmpool, never serve a port, never wait at a
fork. Standard library and ``prometheus_client``; it runs in mmpool's own Python.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import time
from types import SimpleNamespace
from typing import Any

from mmpool_record import metrics as _metrics
from mmpool_record import recfmt
from mmpool_record.metrics_caches import CacheMetrics
from mmpool_record.say import say

POLL_S = 0.5
PID_FILE = "follow.pid"  # while this process reads the recording (tests wait for it to go)


class _Pool:
    """One pool's state as its records tell it: the leases held, for the gauges and the lifetimes."""

    def __init__(self, info: dict[str, Any], series: Any) -> None:
        layout = info[recfmt.K_LAYOUT]
        self.series = series
        self.control = int(layout.get("control_bytes", 0)) if info[recfmt.K_TRANSPORT] == "cuda_vmm" else 0
        self.low, self.high = int(layout.get("data_start", 0)), int(layout["memory_size"])
        self.live: dict[int, tuple[int, int, int]] = {}  # start -> (end, bytes, t)
        self.started = False

    def alloc(self, t: int, asked: int, start: int, end: int, held: bool) -> None:
        nbytes = asked - self.control
        if not held:
            self.series.on_alloc(nbytes, start >= 0)
        if start >= 0:
            self.live[start] = (end, nbytes, t)

    def release(self, t: int, start: int) -> None:
        got = self.live.pop(start, None)
        if got is not None:
            self.series.on_release(got[1], max(0, t - got[2]) / 1e9)

    def state(self) -> None:
        ranges = sorted((start, end) for start, (end, _, _) in self.live.items())
        leased = sum(end - start for start, end in ranges)
        largest, at = 0, self.low
        for start, end in ranges:
            largest, at = max(largest, start - at), max(at, end)
        self.series.on_state(leased, max(largest, self.high - at), len(ranges))


class _Cache:
    """One multimodal cache's state as its records tell it: its bytes and entries."""

    def __init__(self, series: Any) -> None:
        self.series, self.nbytes, self.entries = series, 0, 0

    def record(self, kind: int, a: int, b: int, c: int) -> None:
        if kind == recfmt.CACHE_LOOKUP:
            if c < 0:  # a look the cache does not count (the preprocess cache's absent get_if_present)
                return
            self.series.on_lookup(bool(b))
        elif kind == recfmt.CACHE_INSERT:
            if b > 0:
                self.series.on_insert()
                self.entries += 1
            self.nbytes = c  # the cache's own count after the call
        elif kind == recfmt.CACHE_EVICT:
            self.series.on_evict(a, b)
            self.entries -= a
        elif kind == recfmt.CACHE_FREE:
            self.nbytes -= b
            self.entries = 0 if a == 0 else self.entries - 1
        elif kind == recfmt.CACHE_WAIT:
            self.series.on_wait()
        else:  # CACHE_REQUEST, CACHE_UNREF, CACHE_BATCH: the cache's bytes and entries are as they were
            return
        self.series.on_state(self.nbytes, max(self.entries, 0))


class Follower:
    """Every stream of one recording, read as it grows."""

    def __init__(self, out_dir: str, port: int | None, addr: str) -> None:
        self.out_dir, self.port, self.addr = out_dir, port, addr
        self.metrics: Any = None
        self.chosen = False
        self.pools: dict[tuple[str, int], _Pool] = {}  # (stream, pool index)
        self.keys: dict[tuple[str, int], _Pool] = {}  # (stream, pool id) -> its pool
        self.caches: dict[tuple[str, int], _Cache] = {}  # (stream, cache index)
        self.cache_keys: dict[tuple[str, int], _Cache] = {}  # (stream, cache id) -> its cache
        self.at: dict[str, tuple[int, int]] = {}  # stream -> (part, bytes read of it)
        self.server: Any = None
        self.events = 0  # the pools' and caches' records read (their registrations, HELD and END are not events)

    def _choose(self, info: dict[str, Any]) -> None:
        """Where the series go, decided at the first pool: its process's multiprocess directory, or ours."""
        self.chosen = True
        joined = info.get(recfmt.K_PROMETHEUS_DIR)
        if joined and os.path.isdir(joined):
            os.environ["PROMETHEUS_MULTIPROC_DIR"] = joined
        elif self.port is None:
            return  # nowhere to publish: the records are still read, for nothing
        config = SimpleNamespace(out_dir=self.out_dir, metrics_port=self.port)
        self.metrics = _metrics.start(config)

    def serve(self) -> None:
        """Serve the port now, before any pool: a scrape finds it as soon as the command runs."""
        if self.port is None:
            return
        from mmpool_record import metrics_serve

        private = os.path.join(self.out_dir, _metrics.PRIVATE_DIR)
        os.makedirs(private, exist_ok=True)
        self.server = metrics_serve.serve(self.port, private, self.addr)

    def poll(self) -> None:
        """Read what every stream has added since the last poll; never raises."""
        try:
            self._manifests()
            for stream in list(self.at):
                self._read(stream)
            for pool in self.pools.values():
                if pool.started:
                    pool.state()
        except Exception as e:  # the recording is not harmed by a failure here: said, then the next poll
            say(f"the metrics missed a step ({type(e).__name__}: {e})")

    def _manifests(self) -> None:
        for name in sorted(os.listdir(self.out_dir)):
            cache = name.startswith("cache-")
            if not (name.startswith(("pool-", "cache-")) and name.endswith(".json")):
                continue
            with open(os.path.join(self.out_dir, name), encoding="utf-8") as f:
                info = json.load(f)
            if info.get(recfmt.K_FORMAT) != recfmt.FORMAT_STREAM:
                continue
            stream, index = str(info[recfmt.K_STREAM]), int(info[recfmt.K_POOL])
            if (stream, index) in (self.caches if cache else self.pools):
                continue
            if not self.chosen:
                self._choose(info)
            self.at.setdefault(stream, (0, 0))
            if cache:
                labels = {"cache": str(info[recfmt.K_CACHE]), "pid": str(info[recfmt.K_PID])}
                size, unit = int(info[recfmt.K_CACHE_BYTES]), str(info.get(recfmt.K_CACHE_UNIT) or "bytes")
                if self.metrics is not None:
                    self.caches[(stream, index)] = _Cache(self.metrics.cache(labels, size, unit))
                else:
                    unseen = CacheMetrics(_metrics.Nowhere(), labels, size, unit)
                    self.caches[(stream, index)] = _Cache(unseen)
                continue
            labels = {
                "pool": str(index),
                "pid": str(info[recfmt.K_PID]),
                "transport": str(info[recfmt.K_TRANSPORT]),
                "gpu": str(info.get(recfmt.K_DEVICE, "")),
            }
            capacity = int(info[recfmt.K_LAYOUT]["memory_size"])
            if self.metrics is not None:
                series = self.metrics.pool(labels, capacity)
            else:  # nowhere to publish: the same calls, each a no-op
                series = _metrics.PoolMetrics(_metrics.Nowhere(), labels, capacity)
            self.pools[(stream, index)] = _Pool(info, series)
            self.at.setdefault(stream, (0, 0))

    def _read(self, stream: str) -> None:
        part, done = self.at[stream]
        while True:
            path = os.path.join(self.out_dir, recfmt.part_name(stream, part))
            later = os.path.exists(os.path.join(self.out_dir, recfmt.part_name(stream, part + 1)))
            try:
                with open(path, "rb") as f:
                    f.seek(done)
                    data = f.read()
            except FileNotFoundError:
                data = b""
            head = recfmt.HEADER.size if done == 0 and len(data) >= recfmt.HEADER.size else 0
            whole = (len(data) - head) // recfmt.RECORD.size * recfmt.RECORD.size
            for record in recfmt.RECORD.iter_unpack(data[head : head + whole]):
                self._record(stream, *record)
            done += head + whole
            if not later:
                break
            part, done = part + 1, 0  # the writer closed this part before it made the next
        self.at[stream] = (part, done)

    def summary(self) -> str:
        """What the recording holds, said once the command ended: a recording of nothing is a warning."""
        pools, caches = len(self.pools), len(self.caches)
        if not pools and not caches:
            return (
                f"warning: nothing was recorded in {self.out_dir}: the command made no pool or multimodal cache of "
                "SGLang or vLLM in a Python process the hook reached (docs/record.md, How it loads)"
            )
        return (
            f"recorded in {self.out_dir}: {pools:,} pool{'s' * (pools != 1)}, {caches:,} cache{'s' * (caches != 1)}, "
            f"{self.events:,} event{'s' * (self.events != 1)}"
        )

    def _record(self, stream: str, kind: int, key: int, t: int, a: int, b: int, c: int) -> None:
        if kind not in (recfmt.REGISTER, recfmt.CACHE_REGISTER, recfmt.HELD, recfmt.END):
            self.events += 1
        if kind == recfmt.REGISTER:
            pool = self.pools.get((stream, a))
            if pool is not None:
                self.keys[(stream, key)] = pool
            return
        if kind == recfmt.CACHE_REGISTER:
            cache = self.caches.get((stream, a))
            if cache is not None:
                self.cache_keys[(stream, key)] = cache
            return
        if kind in recfmt.CACHE_KINDS:
            found = self.cache_keys.get((stream, key))
            if found is not None:
                found.record(kind, a, b, c)
            return
        if kind == recfmt.END:
            if self.metrics is not None:
                if a:
                    self.metrics.dropped(a)
                if b:
                    self.metrics.hook_error(b)
            return
        pool = self.keys.get((stream, key))
        if pool is None:
            return
        if kind == recfmt.HELD:
            if not pool.started:
                pool.alloc(t, a, b, c, held=True)
            return
        pool.started = True
        if kind == recfmt.ALLOC:
            pool.alloc(t, a, b, c, held=False)
        elif kind in (recfmt.RELEASE, recfmt.TICK_FREE):
            pool.release(t, a)


def run(out_dir: str, command_pid: int, port: int | None, addr: str) -> None:
    """Follow the recording at ``out_dir`` until the command (``command_pid``, this process's parent) ends."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the terminal's Ctrl-C is the command's to take
    ended: list[int] = []
    signal.signal(signal.SIGTERM, lambda number, _frame: ended.append(number))  # the command's end (prctl)
    pid_file = os.path.join(out_dir, PID_FILE)
    with open(pid_file, "w", encoding="utf-8") as f:
        f.write(f"{os.getpid()}\n")
    follower = Follower(out_dir, port, addr)
    try:
        follower.serve()
        while not ended and os.getppid() == command_pid:
            follower.poll()
            time.sleep(POLL_S)
        follower.poll()  # the last records, written as the command ended
        say(follower.summary())
    finally:
        if follower.metrics is not None:
            follower.metrics.close()
        if follower.server is not None:
            follower.server.shutdown()
            follower.server.server_close()
        with contextlib.suppress(OSError):
            os.remove(pid_file)
