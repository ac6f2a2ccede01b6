"""This process's recorder: its settings, its buffer, its pools and its writer, in one object.

The allocating thread appends one fixed-size binary record (``recfmt.RECORD``, packed by the
wrappers in ``pools.py``) to ``Recorder.buf``, a bytearray, with its bound ``extend``: no lock, no
lookup beyond a set, no formatting. Every ``DRAIN_S`` the writer thread moves what is there to the
process's stream file (``<stream>.<part>.bin``) with one ``os.write``: it reads nothing and formats
nothing, whatever the event rate. mmpool turns the stream into traces after the run
(``traces/record_stream.py``), off the server. Taking the bytes is ``buf[:n]`` then ``del buf[:n]``:
each one C call under the GIL, and an append between the two only adds past ``n``.

Bounded: the buffer holds at most ``buffer`` records (past that an event is dropped and counted,
never waited for); a part rotates past ``max_bytes`` (plus at most one drain's records), the new one
beginning with every pool's registration and the leases it holds, read under the pool's own lock so
that no event falls between the cut and the snapshot.

Fork: a child gets the same object, emptied (``after_fork``): none of its parent's pools, bytes, file
or lock, and its own stream from its first event; the parent's exit handlers, inherited, act only in
the process that opened the stream (``pid``). Standard library only.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import sys
import threading
import time
import weakref
from collections.abc import Callable
from typing import Any, Protocol

from mmpool_record import recfmt
from mmpool_record.config import DEFAULT_BUFFER, Config
from mmpool_record.say import say

DRAIN_S = 0.02
PACK = recfmt.RECORD.pack
_ENV = ("SGLANG_MM_FEATURE_CACHE_MB", "SGLANG_MM_ITEM_MEM_POOL_RECYCLE_INTERVAL_SEC", "SGLANG_MM_FEATURE_TRANSPORT")


class Shape(Protocol):
    """What the recorder asks of a pool's kind (``pools.py`` knows SGLang's attributes); a cache's
    shape (``caches.py``) has ``cache``, its name, and a ``layout`` of its own."""

    @property
    def transport(self) -> str: ...

    @property
    def cache(self) -> str | None: ...

    def layout(self, pool: Any) -> dict[str, Any]: ...

    def held(self, pool: Any) -> list[tuple[int, int, int]]: ...

    def lock(self, pool: Any) -> Any: ...


class Pool:
    """One pool (or cache) of this process: its index, its kind, a weak reference, its manifest."""

    __slots__ = ("index", "shape", "ref", "key", "manifest", "name")

    def __init__(self, index: int, shape: Shape, pool: Any, manifest: dict[str, Any], name: str) -> None:
        self.index, self.shape, self.ref, self.key, self.manifest = index, shape, weakref.ref(pool), id(pool), manifest
        self.name = name  # its manifest's file name


def _version(dist: str) -> str | None:
    """The installed version of ``dist`` (``sglang``, ``vllm``), None where it is not installed as a package."""
    try:
        from importlib.metadata import version

        return version(dist)
    except Exception:
        return None


class Recorder:
    """The one recorder of a process (``RECORDER``); ``setup`` turns it on."""

    def __init__(self) -> None:
        self.config: Config | None = None
        self.buf = bytearray()
        self.capacity = DEFAULT_BUFFER * recfmt.RECORD.size
        self.releases: dict[str, list[str]] = {}  # transport -> the releases whose code it matched
        self._hooks_installed = False
        self.seen: set[int] = set()  # the pools registered (their ids); the wrappers hold it
        self._fresh()

    def _fresh(self) -> None:
        self.pid = os.getpid()
        del self.buf[:]  # in place: the wrappers hold its ``extend``
        self.limit = 0  # bytes; 0 until the first event, which takes ``slow`` and opens the stream
        self.seen.clear()  # in place, as the buffer
        self.broken: set[int] = set()  # pools whose registration failed: their events are dropped
        self.failed = False  # the stream could not be opened: nothing is recorded in this process
        self.pools: list[Pool] = []
        self.caches: list[Pool] = []
        self.pending: list[Pool] = []
        self.dropped = self.errors = 0
        self._error_said = False
        self.lock = threading.Lock()  # one drain at a time
        self._open_lock = threading.Lock()
        self.stop = threading.Event()
        self.thread: threading.Thread | None = None
        self.fd, self.part, self.size, self.stream = -1, 0, 0, ""
        self.closed = False

    def setup(self, config: Config) -> None:
        """Recording on, with ``config``; nothing is opened before the first event."""
        os.makedirs(config.out_dir, exist_ok=True)
        self.config = config
        self.capacity = config.buffer * recfmt.RECORD.size

    # -- the allocating thread's slow path ------------------------------------------------------

    def slow(self, pool: Any, shape: Shape, kind: int, t: int, a: int, b: int, c: int) -> None:
        """An event that found the pool unknown or the buffer at its limit: open, register, or drop.

        Once per process and per pool, under a lock of its own (two pools' first events may come in
        two threads at once); a failure is counted once and never tried again."""
        key = id(pool)
        if key not in self.seen and key not in self.broken and not self.failed:
            with self._open_lock:
                if self.thread is None and not self.failed:
                    try:
                        self._open()
                    except Exception as e:
                        self.failed = True
                        self.error(e)
                if key not in self.seen and self.thread is not None:
                    try:
                        self._register(pool, shape, key, t)
                    except Exception as e:
                        self.broken.add(key)
                        self.error(e)
        if key in self.seen and len(self.buf) < self.limit:
            self.buf.extend(PACK(kind, key, t, a, b, c))
        else:
            self.dropped += 1

    def _register(self, pool: Any, shape: Shape, key: int, t: int) -> None:
        if shape.cache is not None:
            self._register_cache(pool, shape, key, t)
            return
        index = len(self.pools)
        manifest = {
            recfmt.K_FORMAT: recfmt.FORMAT_STREAM,
            recfmt.K_STREAM: self.stream,
            recfmt.K_PID: self.pid,
            recfmt.K_POOL: index,
            recfmt.K_SGLANG: _version("sglang"),
            recfmt.K_CODE_OF: self.releases.get(shape.transport, []),
            recfmt.K_TRANSPORT: shape.transport,
            recfmt.K_ENV: {k: os.environ[k] for k in _ENV if k in os.environ},
            recfmt.K_PROMETHEUS_DIR: os.environ.get("PROMETHEUS_MULTIPROC_DIR") or None,
            recfmt.K_T0: t,
            recfmt.K_T0_UNIX: time.time_ns() - (time.monotonic_ns() - t),
            recfmt.K_COMPLETE: False,
        }
        layout = dict(shape.layout(pool))  # now, once: read from the attributes SGLang's __init__ set
        manifest[recfmt.K_INTERVAL] = layout.pop("recycle_interval_s")
        manifest[recfmt.K_TRANSPORT_NAME] = layout.pop("transport_name")
        manifest[recfmt.K_DEVICE] = layout.pop("device")
        manifest[recfmt.K_LAYOUT] = layout
        entry = Pool(index, shape, pool, manifest, recfmt.pool_manifest(self.pid, index))
        self.seen.add(key)
        weakref.finalize(pool, self.seen.discard, key)  # a new pool at a dead one's address is a new pool
        self.pools.append(entry)
        self.pending.append(entry)
        transport = recfmt.TRANSPORTS.index(shape.transport)
        self.buf.extend(PACK(recfmt.REGISTER, key, t, index, transport, 0))  # never dropped: few, and needed

    def _register_cache(self, cache: Any, shape: Shape, key: int, t: int) -> None:
        assert shape.cache is not None
        index = len(self.caches)
        engine = recfmt.K_VLLM if shape.cache.startswith("vllm_") else recfmt.K_SGLANG
        manifest = {
            recfmt.K_FORMAT: recfmt.FORMAT_STREAM,
            recfmt.K_STREAM: self.stream,
            recfmt.K_PID: self.pid,
            recfmt.K_POOL: index,
            recfmt.K_CACHE: shape.cache,
            engine: _version(engine),  # the cache's engine: recfmt.K_SGLANG or recfmt.K_VLLM
            recfmt.K_CODE_OF: self.releases.get(shape.cache, []),
            recfmt.K_PROMETHEUS_DIR: os.environ.get("PROMETHEUS_MULTIPROC_DIR") or None,
            recfmt.K_T0: t,
            recfmt.K_COMPLETE: False,
            **shape.layout(cache),
        }
        entry = Pool(index, shape, cache, manifest, recfmt.cache_manifest(self.pid, index))
        self.seen.add(key)
        weakref.finalize(cache, self.seen.discard, key)
        self.caches.append(entry)
        self.pending.append(entry)
        kind = recfmt.CACHES.index(shape.cache)
        self.buf.extend(PACK(recfmt.CACHE_REGISTER, key, t, index, kind, 0))

    def error(self, e: BaseException) -> None:
        """Count a failure of the hook's own code; say the first one, once."""
        self.errors += 1
        if not self._error_said:
            self._error_said = True
            say(
                f"the hook failed ({type(e).__name__}: {e}); the program is unaffected, "
                "further failures are counted in the recording"
            )

    # -- the stream ------------------------------------------------------------------------------

    def _open(self) -> None:
        config = self.config
        if config is None:
            return
        stream = recfmt.stream_name(self.pid)
        if any(recfmt.part_number(stream, n) is not None for n in os.listdir(config.out_dir)):
            stream = f"{stream}-{time.time_ns()}"  # a process id used again
        self.stream, self.part = stream, 0
        self._open_part()
        self.thread = threading.Thread(target=self._run, name="mmpool-record-writer", daemon=True)
        self.thread.start()
        self.limit = self.capacity
        if not self._hooks_installed:  # inherited by a forked child: they check ``pid``
            self._hooks_installed = True
            atexit.register(self.close)
            _wrap_os_exit(self)
        util = sys.modules.get("multiprocessing.util")  # its children end by os._exit, after its finalizers
        if util is not None:
            try:
                util.Finalize(None, self.close, exitpriority=-100)
            except Exception as e:
                self.error(e)

    def _open_part(self) -> None:
        assert self.config is not None
        path = os.path.join(self.config.out_dir, recfmt.part_name(self.stream, self.part))
        self.fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_APPEND | os.O_CLOEXEC, 0o644)
        self.size = 0
        self._write(recfmt.HEADER.pack(recfmt.MAGIC, recfmt.STREAM_VERSION, self.part, self.pid, 0, 0))

    def _write(self, data: bytes | bytearray) -> None:
        view = memoryview(data)
        while view:
            view = view[os.write(self.fd, view) :]
        self.size += len(data)

    def _take(self) -> bytearray:
        buf = self.buf
        n = len(buf)
        data = buf[:n]
        del buf[:n]
        return data

    def _run(self) -> None:
        while not self.stop.wait(DRAIN_S):
            self.drain()

    def drain(self, final: bool = False) -> None:
        """Write what the buffer holds (rotating first past ``max_bytes``); never raises."""
        if not self.lock.acquire(timeout=5.0 if final else -1):
            return
        try:
            self._drain_locked()
        except Exception as e:
            self.error(e)
        finally:
            self.lock.release()

    def _drain_locked(self) -> None:
        if self.fd < 0 or self.config is None:
            return
        self._manifests(self.pending)
        data = self._take()
        if data and self.size + len(data) > self.config.max_bytes and self.size > recfmt.HEADER.size:
            self._rotate(data)
        elif data:
            self._write(data)

    def _rotate(self, data: bytearray) -> None:
        """A new part, which begins with each live pool's registration and leases held, under its lock."""
        live = [(p, pool) for p in self.pools if (pool := p.ref()) is not None]
        held: list[Any] = []
        try:
            for p, pool in live:
                lock = p.shape.lock(pool)
                if not lock.acquire(timeout=1.0):
                    self._write(data)  # the pool is busy: this part grows a little, the next drain tries again
                    return
                held.append(lock)
            self._write(data + self._take())  # nothing more can come: every event is taken under its pool's lock
            os.close(self.fd)
            self.part += 1
            self._open_part()
            now = time.monotonic_ns()
            head = bytearray()
            for p, pool in live:
                head += PACK(recfmt.REGISTER, p.key, now, p.index, recfmt.TRANSPORTS.index(p.shape.transport), 0)
                for nbytes, start, end in p.shape.held(pool):
                    head += PACK(recfmt.HELD, p.key, now, nbytes, start, end)
            for p in self.caches:
                head += PACK(recfmt.CACHE_REGISTER, p.key, now, p.index, recfmt.CACHES.index(str(p.shape.cache)), 0)
            self._write(head)
        finally:
            for lock in held:
                lock.release()

    def _manifests(self, pools: list[Pool], final: bool = False) -> None:
        assert self.config is not None
        for p in list(pools):
            info = dict(p.manifest, stream=self.stream)
            if final:
                info.update({recfmt.K_COMPLETE: self.dropped == 0, recfmt.K_DROPPED: self.dropped})
                info[recfmt.K_ERRORS] = self.errors
            path = os.path.join(self.config.out_dir, p.name)
            with open(path + ".tmp", "w", encoding="utf-8") as f:
                json.dump(info, f, indent=1)
                f.write("\n")
            os.replace(path + ".tmp", path)
            if p in self.pending:
                self.pending.remove(p)

    def close(self) -> None:
        """The last events, the stream's END, the manifests marked final; at exit, in its own process only."""
        if self.closed or self.thread is None or self.pid != os.getpid():
            return
        self.closed = True
        self.stop.set()
        if not self.lock.acquire(timeout=5.0):
            return
        try:
            self._drain_locked()
            end = PACK(recfmt.END, 0, time.monotonic_ns(), self.dropped, self.errors, 0)
            self._write(self._take() + end)
            os.close(self.fd)
            self.fd = -1
            self._manifests(self.pools + self.caches, final=True)
        except Exception as e:
            self.error(e)
        finally:
            self.lock.release()
        if self.dropped:
            say(
                f"{self.dropped} events dropped (the buffer of {self.capacity // recfmt.RECORD.size} was full); "
                "this process's trace is incomplete, its pool-*.json say so"
            )

    def after_fork(self) -> None:
        """In a forked child: none of the parent's pools, bytes, stream or locks; its own from its first event."""
        fd = self.fd
        self._fresh()
        if fd >= 0:
            with contextlib.suppress(OSError):
                os.close(fd)  # the child's copy; the parent's stays open


def _wrap_os_exit(rec: Recorder) -> None:
    """``os._exit`` (a forked child's way out, skipping atexit) writes this process's last events first."""
    real: Callable[[int], Any] = getattr(os._exit, "__wrapped__", os._exit)

    def _exit(status: int) -> None:
        with contextlib.suppress(BaseException):
            rec.close()
        real(status)

    _exit.__wrapped__ = real  # type: ignore[attr-defined]
    os._exit = _exit  # type: ignore[assignment]


RECORDER = Recorder()
