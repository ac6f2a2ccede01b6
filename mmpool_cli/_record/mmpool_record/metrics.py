"""Live pool metrics in Prometheus' exposition format, through ``prometheus_client``.

Standard library and ``prometheus_client`` only: it runs in the process ``mmpool record`` leaves beside
the command (``follow.py``), never in the server's::

    metrics = start(config)                    # None: prometheus_client is missing (said once)
    pool = metrics.pool({"pool": "0", "transport": "cuda_ipc", "gpu": "0"}, capacity_bytes)
    pool.on_alloc(nbytes, hit)                 # every allocation, a miss with hit=False
    pool.on_release(nbytes, lifetime_s)        # every lease the pool took back
    pool.on_state(leased_bytes, largest_free_bytes, in_flight)
    metrics.dropped(n); metrics.hook_error()   # the hook's own health

Where the series go is decided in each process at its first ``pool`` (or health) call, when the
server has set its environment up:

- ``PROMETHEUS_MULTIPROC_DIR`` set (SGLang's ``--enable-metrics``, ``srt/utils/common.py:2825``):
  into that directory, so SGLang's own ``/metrics`` shows them: through prometheus_client's value
  class when it is in multiprocess mode (one writer per file), else (it was imported before the
  variable existed) through files of mmpool's own in the same format.
- otherwise, with ``--metrics-port``: into ``<out_dir>/metrics.d``, which ``follow.py`` serves on the
  port (``metrics_serve.py``) with the ``mmpool_`` series of ``PROMETHEUS_MULTIPROC_DIR``.
- neither: nowhere (no-op objects).

Nothing here sets ``PROMETHEUS_MULTIPROC_DIR``. Importing prometheus_client first while it is unset,
this module makes prometheus_client choose its value class as each metric is made, not at import, as
if the program had imported it later. After a fork, call ``start`` again: objects belong to a process.
"""

from __future__ import annotations

import importlib.util
import os
import sys
import threading
from collections.abc import Mapping
from typing import Any

from mmpool_record.metrics_caches import CACHE_LABELS, CacheMetrics
from mmpool_record.say import say

PREFIX = "mmpool_"
POOL_LABELS = ("pool", "pid", "transport", "gpu")
# lease lifetimes gather at multiples of SGLang's 0.05 s recycle tick (environ.py:1623)
LIFETIME_BUCKETS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.5, 1.0, 2.5, 5.0, 10.0)
PRIVATE_DIR = "metrics.d"
_MP_ENV = "PROMETHEUS_MULTIPROC_DIR"

# (name, kind, help); counters are named without _total, as prometheus_client takes them
POOL_SERIES = (
    ("mmpool_pool_capacity_bytes", "gauge", "Bytes the pool holds in all."),
    ("mmpool_pool_leased_bytes", "gauge", "Bytes of the pool leased to features not yet recycled."),
    ("mmpool_pool_largest_free_range_bytes", "gauge", "Bytes of the pool's largest free range."),
    ("mmpool_pool_leases_in_flight", "gauge", "Leases not yet recycled."),
    ("mmpool_pool_allocations", "counter", "Allocations asked of the pool, hits and misses."),
    ("mmpool_pool_allocated_bytes", "counter", "Bytes asked of the pool, hits and misses."),
    ("mmpool_pool_misses", "counter", "Allocations the pool could not place (sent by value)."),
    ("mmpool_pool_missed_bytes", "counter", "Bytes of the allocations the pool could not place."),
    ("mmpool_pool_released_bytes", "counter", "Bytes the pool took back."),
    ("mmpool_pool_lease_lifetime_seconds", "histogram", "Seconds from a lease's allocation to its recycling."),
)
HEALTH_SERIES = (
    ("mmpool_record_dropped_events", "counter", "Events the hook dropped because its buffer was full."),
    ("mmpool_record_hook_errors", "counter", "Errors inside mmpool's hook (the server was not affected)."),
)

_said: set[str] = set()


def _say(message: str) -> None:
    """One line on stderr, once per process."""
    if message not in _said:
        _said.add(message)
        say(message)


def start(config: Any) -> Metrics | None:
    """This process's metrics, or None when prometheus_client is not installed (said once).

    ``config`` needs ``out_dir`` and ``metrics_port`` (``config.Config``). With a port, the first
    process to bind it serves every process's metrics.
    """
    if importlib.util.find_spec("prometheus_client") is None:
        if config.metrics_port is not None:
            _say("prometheus_client is not installed in this Python: the metrics are off")
        return None
    private = None
    if config.metrics_port is not None:
        private = os.path.join(config.out_dir, PRIVATE_DIR)
        try:
            os.makedirs(private, exist_ok=True)
        except OSError as error:  # the pools still join PROMETHEUS_MULTIPROC_DIR if the server has one
            _say(f"{private}: cannot be made ({error.strerror}): the metrics are not served on the port")
            private = None
    return Metrics(private_dir=private)


def _mp_dir() -> str | None:
    return os.environ.get(_MP_ENV) or os.environ.get(_MP_ENV.lower())


_importing = threading.Lock()


def _before_fork() -> None:
    # a fork while the writer imports prometheus_client would leave the child a half-made module and a held lock
    if _importing.acquire(timeout=2.0):
        _importing.release()


def _in_child() -> None:
    global _importing
    _importing = threading.Lock()


os.register_at_fork(before=_before_fork, after_in_child=_in_child)


def _import_client() -> Any:
    """prometheus_client, imported without fixing its value class before the program could choose it."""
    with _importing:  # the writer and the port's thread: one of them installs the choice, once
        fresh = "prometheus_client" not in sys.modules
        unset = _MP_ENV not in os.environ and _MP_ENV.lower() not in os.environ
        prometheus_client = importlib.import_module("prometheus_client")
        if fresh and unset:
            _choose_value_class_at_creation(prometheus_client.values)
        return prometheus_client


def _choose_value_class_at_creation(values: Any) -> None:
    if getattr(values.ValueClass, "_mmpool_deferred", False):
        return
    made: list[Any] = []

    class ValueClassAtCreation:
        """prometheus_client's ``values.get_value_class()``, asked when a metric is made."""

        _mmpool_deferred = True

        def __new__(cls, *args: Any, **kwargs: Any) -> Any:
            if _mp_dir() is None:
                return values.MutexValue(*args, **kwargs)
            if not made:
                made.append(values.MultiProcessValue())
            return made[0](*args, **kwargs)

    values.ValueClass = ValueClassAtCreation


def _client_is_multiprocess(client: Any) -> bool:
    value_class = client.values.ValueClass
    if getattr(value_class, "_mmpool_deferred", False):
        return _mp_dir() is not None
    return bool(getattr(value_class, "_multiprocess", False))


class _ClientSink:
    """Series through prometheus_client's own metric classes (a registry, or its multiprocess files)."""

    def __init__(self, client: Any, registry: Any) -> None:
        self._client, self._registry, self._families = client, registry, dict[str, Any]()

    def series(self, name: str, kind: str, doc: str, labels: Mapping[str, str]) -> Any:
        family = self._families.get(name)
        if family is None:
            names = tuple(labels)
            if kind == "counter":
                family = self._client.Counter(name, doc, names, registry=self._registry)
            elif kind == "gauge":
                # the pid is a label, as "liveall" adds it: the live value, gone when its process dies
                family = self._client.Gauge(name, doc, names, registry=self._registry, multiprocess_mode="liveall")
            else:
                family = self._client.Histogram(name, doc, names, registry=self._registry, buckets=LIFETIME_BUCKETS)
            self._families[name] = family
        return family.labels(**labels)


class _FileValue:
    def __init__(self, file: Any, key: str) -> None:
        self._file, self._key = file, key
        self._value = file.read_value(key)[0]

    def inc(self, amount: float) -> None:
        self.set(self._value + amount)

    def set(self, value: float) -> None:
        self._value = value
        self._file.write_value(self._key, value, 0.0)


class _FileHistogram:
    def __init__(self, buckets: list[_FileValue], total: _FileValue) -> None:
        self._buckets, self._sum = buckets, total

    def observe(self, amount: float) -> None:
        self._sum.inc(amount)
        for bound, value in zip((*LIFETIME_BUCKETS, float("inf")), self._buckets, strict=True):
            if amount <= bound:  # per-bucket counts: the collector accumulates them, as for its own files
                value.inc(1.0)
                return


class _FileSink:
    """Series in prometheus_client's multiprocess file format, in a directory of this process's own files."""

    def __init__(self, client: Any, directory: str) -> None:
        mmap_dict = importlib.import_module("prometheus_client.mmap_dict")
        self._dict, self._key = mmap_dict.MmapedDict, mmap_dict.mmap_key
        self._go = client.utils.floatToGoString
        self._dir, self._files = directory, dict[str, Any]()

    def _value(self, prefix: str, name: str, sample: str, labels: Mapping[str, str], doc: str) -> _FileValue:
        file = self._files.get(prefix)
        if file is None:
            file = self._files[prefix] = self._dict(os.path.join(self._dir, f"{prefix}_{os.getpid()}.db"))
        return _FileValue(file, self._key(name, sample, list(labels), list(labels.values()), doc))

    def series(self, name: str, kind: str, doc: str, labels: Mapping[str, str]) -> Any:
        if kind == "counter":
            return self._value("counter", name, name + "_total", labels, doc)
        if kind == "gauge":
            return self._value("gauge_liveall", name, name, labels, doc)
        buckets = [
            self._value("histogram", name, name + "_bucket", {**labels, "le": self._go(bound)}, doc)
            for bound in (*LIFETIME_BUCKETS, float("inf"))
        ]
        return _FileHistogram(buckets, self._value("histogram", name, name + "_sum", labels, doc))

    def close(self) -> None:
        for file in self._files.values():
            file.close()


class PoolMetrics:
    """One pool's series; every method is called by the hook's writer thread only."""

    def __init__(self, sink: Any, labels: Mapping[str, str], capacity_bytes: int) -> None:
        s = {name: sink.series(name, kind, doc, labels) for name, kind, doc in POOL_SERIES}
        self._leased = s["mmpool_pool_leased_bytes"]
        self._largest = s["mmpool_pool_largest_free_range_bytes"]
        self._in_flight = s["mmpool_pool_leases_in_flight"]
        self._allocs, self._alloc_bytes = s["mmpool_pool_allocations"], s["mmpool_pool_allocated_bytes"]
        self._misses, self._miss_bytes = s["mmpool_pool_misses"], s["mmpool_pool_missed_bytes"]
        self._released, self._lifetime = s["mmpool_pool_released_bytes"], s["mmpool_pool_lease_lifetime_seconds"]
        s["mmpool_pool_capacity_bytes"].set(capacity_bytes)
        self._largest.set(capacity_bytes)
        for counter in (self._allocs, self._alloc_bytes, self._misses, self._miss_bytes, self._released):
            counter.inc(0)  # every series is there from the start, so that rate() sees its first step

    def on_alloc(self, nbytes: int, hit: bool) -> None:
        """One allocation asked of the pool; ``hit=False`` when it had no room (the tensor goes by value)."""
        self._allocs.inc(1)
        self._alloc_bytes.inc(nbytes)
        if not hit:
            self._misses.inc(1)
            self._miss_bytes.inc(nbytes)

    def on_release(self, nbytes: int, lifetime_s: float) -> None:
        """One lease the pool took back, ``lifetime_s`` after its allocation."""
        self._released.inc(nbytes)
        self._lifetime.observe(lifetime_s)

    def on_state(self, leased_bytes: int, largest_free_bytes: int, in_flight: int) -> None:
        """The pool's state after its latest event."""
        self._leased.set(leased_bytes)
        self._largest.set(largest_free_bytes)
        self._in_flight.set(in_flight)


class Nowhere:
    """The series of a process with nowhere to publish (no port, no multiprocess directory)."""

    def inc(self, amount: float) -> None: ...
    def set(self, value: float) -> None: ...
    def observe(self, amount: float) -> None: ...

    def series(self, name: str, kind: str, doc: str, labels: Mapping[str, str]) -> Nowhere:
        return self


class Metrics:
    """One process's metrics: its pools and the hook's health."""

    def __init__(self, private_dir: str | None = None, registry: Any = None) -> None:
        """``registry``: publish into that prometheus_client registry instead (tests, embedding)."""
        self._private, self._registry, self._pid = private_dir, registry, os.getpid()
        self._sink: Any = None
        self._health: dict[str, Any] = {}
        self.server: Any = None

    def _chosen(self) -> Any:
        if self._sink is not None or os.getpid() != self._pid:
            return self._sink
        mp = _mp_dir()
        if mp is not None and not os.path.isdir(mp):
            mp = None
        if self._registry is None and mp is None and self._private is None:
            return None  # nowhere to publish yet: prometheus_client is not even imported
        client = _import_client()
        if self._registry is not None:
            self._sink = _ClientSink(client, self._registry)
        elif mp is not None:
            self._sink = _ClientSink(client, None) if _client_is_multiprocess(client) else _FileSink(client, mp)
        elif self._private is not None:
            self._sink = _FileSink(client, self._private)
        if self._sink is not None:
            labels = {"pid": str(self._pid)}
            self._health = {name: self._sink.series(name, kind, doc, labels) for name, kind, doc in HEALTH_SERIES}
            for counter in self._health.values():
                counter.inc(0)
        return self._sink

    def pool(self, labels: Mapping[str, str], capacity_bytes: int) -> PoolMetrics:
        """A pool's series; ``labels`` among ``POOL_LABELS`` (``pid`` defaults to this process's)."""
        unknown = set(labels) - set(POOL_LABELS)
        if unknown:
            raise ValueError(f"unknown pool labels {sorted(unknown)}: use {POOL_LABELS}")
        sink = self._chosen() or Nowhere()
        full = {name: str(labels.get(name, "")) for name in POOL_LABELS}
        full["pid"] = full["pid"] or str(self._pid)
        return PoolMetrics(sink, full, capacity_bytes)

    def cache(self, labels: Mapping[str, str], capacity_bytes: int, unit: str = "bytes") -> CacheMetrics:
        """A cache's series; ``labels``: ``cache`` (its name) and ``pid``; ``unit``: what its sizes count."""
        sink = self._chosen() or Nowhere()
        return CacheMetrics(sink, {name: str(labels.get(name, "")) for name in CACHE_LABELS}, capacity_bytes, unit)

    def dropped(self, n: int = 1) -> None:
        """``n`` events the hook dropped (its buffer was full)."""
        if self._chosen() is not None:
            self._health["mmpool_record_dropped_events"].inc(n)

    def hook_error(self, n: int = 1) -> None:
        """``n`` errors the hook caught."""
        if self._chosen() is not None:
            self._health["mmpool_record_hook_errors"].inc(n)

    def close(self) -> None:
        """Stop serving the port (if this process serves it) and close this process's files."""
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()
        if isinstance(self._sink, _FileSink):
            self._sink.close()
        self.server = self._sink = None
