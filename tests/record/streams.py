"""Recordings written with ``recfmt``'s own structs (the format is mmpool's), to be damaged as a crash or a copy does.

A pool that leases and gives back at its ticks, an embedding cache looked up, stored and read back: the
records ``mmpool record``'s hook writes, without running it (``fake_sglang.py`` runs it).
"""

from __future__ import annotations

import json
from pathlib import Path

from mmpool_cli._record.mmpool_record import recfmt

MS = 1_000_000
POOL_ID, CACHE_ID = 1111, 2222
HEAD = recfmt.HEADER.size
SIZE = recfmt.RECORD.size


def pool_records(n: int) -> list[tuple[int, ...]]:
    """A pool that leases ``n`` ranges of 1,000 B, ticking after each: (kind, pool, t, a, b, c)."""
    out: list[tuple[int, ...]] = [(recfmt.REGISTER, POOL_ID, 1, 0, 0, 0)]
    for i in range(n):
        out.append((recfmt.ALLOC, POOL_ID, (i + 1) * 10 * MS, 1000, 256, 1256))
        out.append((recfmt.TICK, POOL_ID, (i + 1) * 50 * MS, 0, 0, 0))
        out.append((recfmt.RELEASE, POOL_ID, (i + 1) * 50 * MS, 256, 1256, 0))
        out.append((recfmt.TICK_END, POOL_ID, (i + 1) * 50 * MS, 0, 0, 0))
    return out


def cache_records(n: int) -> list[tuple[int, ...]]:
    """An embedding cache looked up ``n`` times over two keys, each miss stored and read back."""
    out: list[tuple[int, ...]] = [(recfmt.CACHE_REGISTER, CACHE_ID, 1, 0, 0, 0)]
    stored: set[int] = set()
    for i in range(n):
        key = i % 2 + 7
        hit = key in stored
        out.append((recfmt.CACHE_LOOKUP, CACHE_ID, i + 2, key, int(hit), 100 if hit else 0))
        if not hit:
            stored.add(key)
            out.append((recfmt.CACHE_INSERT, CACHE_ID, i + 2, key, 100, 100 * len(stored)))
            out.append((recfmt.CACHE_LOOKUP, CACHE_ID, i + 2, key, 1, 100))
    return out


def write(root: Path, pid: int, records: list[tuple[int, ...]], *, end: bool = True, part: int = 0) -> Path:
    body = b"".join(recfmt.RECORD.pack(*r) for r in records)
    if end:
        body += recfmt.RECORD.pack(recfmt.END, 0, 0, 0, 0, 0)
    path = root / recfmt.part_name(recfmt.stream_name(pid), part)
    path.write_bytes(recfmt.HEADER.pack(recfmt.MAGIC, recfmt.STREAM_VERSION, part, pid, 0, 0) + body)
    return path


def manifest(root: Path, pid: int, **extra: object) -> None:
    info = {"format": 2, "stream": recfmt.stream_name(pid), "pid": pid, "pool": 0, "transport": "cuda_ipc"}
    info |= {"layout": {"memory_size": 1 << 20, "data_start": 256, "slots": 64, "consumers": 1}}
    info |= {"recycle_interval_s": 0.05, "t0_monotonic_ns": pid, "complete": True, "dropped": 0, **extra}
    (root / recfmt.pool_manifest(pid, 0)).write_text(json.dumps(info))


def recording(root: Path, pids: tuple[int, ...] = (5, 6)) -> dict[int, Path]:
    (root / recfmt.RUN_MANIFEST).write_text(json.dumps({"format": 1, "mmpool": "0", "command": ["python"]}))
    paths = {}
    for pid in pids:
        manifest(root, pid)
        paths[pid] = write(root, pid, pool_records(10))
    return paths


def cache_recording(root: Path, *, end: bool, keep: int | None = None) -> Path:
    info = {"format": 2, "stream": recfmt.stream_name(9), "pid": 9, "pool": 0, "cache": "embedding", "max_bytes": 1000}
    (root / recfmt.cache_manifest(9, 0)).write_text(json.dumps(info))
    path = write(root, 9, cache_records(12), end=end)
    if keep is not None:
        path.write_bytes(path.read_bytes()[:keep])
    return path
