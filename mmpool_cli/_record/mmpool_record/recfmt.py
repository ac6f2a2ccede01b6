"""The recording's format, defined once: file names, manifest keys, versions, records, the time text.

Standard library only and no import of its own package: the hook imports it as ``mmpool_record.recfmt``
inside the server's Python, mmpool as ``mmpool_cli._record.mmpool_record.recfmt`` to read it back.

A recording is a directory:

``recording.json``              the run (``mmpool record`` writes it before the command starts)
``pool-<pid>-<n>.json``         one manifest per pool: release, transport, layout, recycle interval;
                                format 2 names the process's event stream (``stream``)
``cache-<pid>-<n>.json``        one manifest per multimodal cache (SGLang's embedding cache, the
                                preprocess cache; vLLM's processor cache, its encoder cache): its name,
                                its size (bytes; the encoder cache's in tokens), the stream its events are in
``<stream>.<part>.bin``         format 2: a process's events, fixed-size binary records, in parts of
                                about ``--max-bytes``; every part begins with the pools' registrations
                                and the leases they hold, so each part reads alone
``pool-<pid>-<n>.jsonl[.1]``    format 1 (mmpool before the binary stream): the pool's trace as JSON lines

A part is a ``HEADER`` then ``RECORD``s. A record is ``(kind, pool, t, a, b, c)``: ``pool`` the pool
object's ``id`` in its process (``REGISTER`` maps it to the pool's index), ``t`` CLOCK_MONOTONIC ns.
"""

from __future__ import annotations

import struct

RUN_MANIFEST = "recording.json"
POOL_GLOB = "pool-*.json"
PART_SUFFIX = ".bin"

FORMAT_JSONL = 1  # a pool manifest whose trace is JSON lines (older recordings, still read)
FORMAT_STREAM = 2  # a pool manifest whose events are in its process's binary stream
RUN_FORMAT = 1  # recording.json

MAGIC = b"MMPOOLRS"
STREAM_VERSION = 1
HEADER = struct.Struct("<8sqqqqq")  # magic, version, part, pid, 0, 0: as long as a record
RECORD = struct.Struct("<qQqqqq")  # kind, pool id, t (ns), a, b, c

# record kinds (a, b, c)
REGISTER = 1  # (pool index, transport: 0 cuda_ipc / 1 cuda_vmm, 0): before the pool's first event
ALLOC = 2  # (bytes asked, start, end); a miss: (bytes, -1, -1)
RELEASE = 3  # (start, end, 0): a lease (chunk) given back outside a recycler tick, or inside a cuda_ipc one
TICK = 4  # (0, 0, 0): a recycler tick begins (cuda_vmm: its frees follow as TICK_FREE)
TICK_END = 5  # (0, 0, 0): the cuda_ipc tick that TICK began is over
TICK_FREE = 6  # (start, end, 0): a cuda_vmm chunk the tick gave back
HELD = 7  # (bytes, start, end): a lease held when a part began (after a rotation)
END = 8  # (events dropped, hook errors, 0): the process ended cleanly; the last record of its stream
# a multimodal cache's records: ``pool`` is the cache object's id, ``key`` SGLang's hash of the item (or
# of a request's items, combined), as a signed 64-bit number
CACHE_REGISTER = 9  # (cache index, cache kind: an index of CACHES, 0)
CACHE_LOOKUP = 10  # (key, 1 a hit / 0 a miss, the entry's bytes on a hit; -1: a look the cache does not count)
CACHE_INSERT = (
    11  # (key, the entry's bytes; 0: already there, moved to the front; -1: not admitted, the cache's bytes after)
)
CACHE_EVICT = 12  # (entries, bytes, 0): what the insertion before it evicted (least recently used first)
CACHE_FREE = 13  # (key, bytes, 0): an entry taken out by SGLang (``free``); a ``clear``: key 0, every entry's bytes
# vLLM's caches (``size`` below is bytes for the processor cache, encoder tokens for the encoder cache)
CACHE_REQUEST = 14  # (items, 0, 0): a request's items are looked up next (vLLM's ``is_cached`` of its hashes)
CACHE_WAIT = 15  # (key, size, free size): the encoder cache could not make room for the item (``can_allocate``)
CACHE_UNREF = 16  # (key, size, 0): no request holds the entry any more; it stays, evicted only when room is needed
# (0, 0, 0): SGLang's scheduler begins a batch of the embedding cache's lookups (mm_schedule.py: each call that
# looks a batch's items up, then stores its misses); a recording without them reads batches from the stores
CACHE_BATCH = 17
KINDS = frozenset(range(REGISTER, CACHE_BATCH + 1))
CACHE_KINDS = frozenset(range(CACHE_LOOKUP, CACHE_BATCH + 1))  # a cache's records but its registration
TRANSPORTS = ("cuda_ipc", "cuda_vmm")
CACHES = ("embedding", "preprocess", "vllm_processor", "vllm_encoder")

# pool manifest keys
K_FORMAT = "format"
K_FILE = "file"  # format 1: the trace's file name
K_STREAM = "stream"  # format 2: the stream's name (its parts are <stream>.<part>.bin)
K_PID = "pid"
K_POOL = "pool"
K_SGLANG = "sglang"
K_CODE_OF = "code_of"
K_TRANSPORT = "transport"
K_TRANSPORT_NAME = "transport_name"
K_DEVICE = "device"
K_LAYOUT = "layout"
K_INTERVAL = "recycle_interval_s"
K_ENV = "env"
K_T0 = "t0_monotonic_ns"
K_T0_UNIX = "t0_unix_ns"
K_COMPLETE = "complete"
K_DROPPED = "dropped"
K_ERRORS = "errors"
K_EVENTS = "events"  # format 1: counts by kind ("rotations" among them)
K_PROMETHEUS_DIR = "prometheus_multiproc_dir"  # the server's PROMETHEUS_MULTIPROC_DIR, where metrics join it
K_CACHE = "cache"  # a cache manifest: its name, one of CACHES
K_CACHE_BYTES = "max_bytes"  # a cache manifest: the cache's size in bytes (SGLang's max_size)
K_CACHE_ENTRIES = "max_entries"  # a cache manifest: its bound on entries, where it has one (the preprocess cache)
K_CACHE_UNIT = (
    "unit"  # a cache manifest: what its sizes count, "bytes" (absent: bytes) or "tokens" (vLLM's encoder cache)
)
K_CACHE_TYPE = "cache_type"  # vLLM's processor cache: "processor_only", "lru" or "shm" (the sender's class)
K_MAX_OBJECT = "max_object_bytes"  # vLLM's shm processor cache: the largest object its ring takes
K_VLLM = "vllm"  # a vLLM cache's manifest: the installed vLLM's version
CACHE_GLOB = "cache-*.json"
REQUIRED = (K_FORMAT, K_TRANSPORT, K_LAYOUT, K_INTERVAL, K_T0)


def pool_manifest(pid: int, index: int) -> str:
    """The file name of a pool's manifest."""
    return f"pool-{pid}-{index}.json"


def cache_manifest(pid: int, index: int) -> str:
    """The file name of a cache's manifest."""
    return f"cache-{pid}-{index}.json"


def key64(key: int) -> int:
    """SGLang's hash of an item as the record holds it: its low 64 bits, signed."""
    key &= (1 << 64) - 1
    return key - (1 << 64) if key >= 1 << 63 else key


def stream_name(pid: int) -> str:
    """The name of a process's event stream."""
    return f"events-{pid}"


def part_name(stream: str, part: int) -> str:
    """The file name of one part of a stream."""
    return f"{stream}.{part}{PART_SUFFIX}"


def part_number(stream: str, file_name: str) -> int | None:
    """The part a file of ``stream`` is, or None when it is not one."""
    head, tail = f"{stream}.", PART_SUFFIX
    if not (file_name.startswith(head) and file_name.endswith(tail)):
        return None
    middle = file_name[len(head) : -len(tail)]
    return int(middle) if middle.isdigit() and len(middle) < 10 else None


def interval_ns(seconds: float) -> int:
    """The recycle interval on the trace's clock: whole ns, at least 2."""
    return max(2, round(float(seconds) * 1e9))


def t_text(ns: int) -> str:
    """A time in ns as the trace writes it: seconds, a JSON number exact to the ns."""
    return f"{ns // 1_000_000_000}.{ns % 1_000_000_000:09d}"
