"""Read a recording of ``mmpool record``: every pool's trace merged into one, and what the pools did.

A recording is a directory: per pool a trace ``pool-<pid>-<n>.jsonl`` in the trace format
(``simulate.trace``; each alloc with the real ``offset``, null for a miss, each free with the
recycler's ``tick``) and its manifest ``pool-<pid>-<n>.json`` (release, transport, layout, recycle
interval, counts). Each trace is on its pool's tick clock (the k-th tick at k*I), so the pools are
merged by shifting each by whole intervals to where it started; worker i is the i-th pool to start.
A replay at the recording's own layout is compared with the recorded offsets, decision for decision.
"""

from __future__ import annotations

import glob
import heapq
import json
import os
from dataclasses import dataclass, field
from typing import Any

from mmpool_cli.core.findings import Finding, Severity
from mmpool_cli.simulate.events import ALLOC, Events
from mmpool_cli.simulate.recorded_layout import DEFAULT_GRANULARITY, RecordedLayout, of_pools
from mmpool_cli.simulate.replay import SimResult
from mmpool_cli.simulate.trace import MAX_EVENTS, TraceError, read_trace

MAX_POOLS = 1024  # SGLang's --tokenizer-worker-num is at most this in mmpool's plan
MAX_MANIFEST_BYTES = 1 << 20


@dataclass
class Recording:
    """The pools of one recording (manifests, in worker order) and the real offset of every alloc."""

    path: str
    pools: list[dict[str, Any]]
    offsets: list[int | None] = field(default_factory=list)  # per alloc of the merged trace, in order
    ids: list[str] = field(default_factory=list)

    def source(self) -> dict[str, Any]:
        """What the report's ``source`` says of the recording."""
        first = self.pools[0]
        return {
            "recording": self.path,
            "pools": len(self.pools),
            "sglang": first.get("sglang"),
            "code_of": first.get("code_of"),
            "transport": first.get("transport"),
        }


def is_recording(path: str) -> bool:
    """Whether ``--trace`` names a recording's directory rather than one trace."""
    return path != "-" and os.path.isdir(path)


def _manifest(path: str) -> dict[str, Any]:
    try:
        with open(path, "rb") as f:
            data = f.read(MAX_MANIFEST_BYTES + 1)
        info = json.loads(data)
    except (OSError, ValueError) as e:
        raise TraceError(f"{path}: not a pool manifest of mmpool record ({e})") from None
    if len(data) > MAX_MANIFEST_BYTES or not isinstance(info, dict) or info.get("format") != 1:
        raise TraceError(f"{path}: not a pool manifest of mmpool record (format 1)")
    for key in ("file", "transport", "layout", "recycle_interval_s", "t0_monotonic_ns"):
        if key not in info:
            raise TraceError(f"{path}: the manifest has no {key!r}; was the recording cut short?")
    return info


def read_recording(
    path: str,
    workers: int,
    *,
    max_events: int = MAX_EVENTS,
    idle_timeout: float = 30.0,
    keep_ids: bool = True,
    requests: bool = True,
) -> tuple[Events, Recording]:
    """The merged events of the recording at ``path`` for ``workers`` pools, and the recording.

    With as many workers as the recording has pools, pool i's leases go to worker i. With fewer,
    pool i goes to worker ``i % workers``; with more, lease j goes to worker ``j % workers`` (a
    what-if: the recorded lifetimes, dealt out). Raises TraceError for a directory that is no
    recording, a trace that is not valid, or more than ``max_events`` events in all.
    """
    manifests = sorted(glob.glob(os.path.join(glob.escape(path), "pool-*.json")))
    if not manifests:
        raise TraceError(f"{path}: no pool-*.json: not a recording of mmpool record, or no pool was recorded")
    if len(manifests) > MAX_POOLS:
        raise TraceError(f"{path}: {len(manifests)} pools; mmpool reads at most {MAX_POOLS}")
    pools = [_manifest(m) for m in manifests]
    pools.sort(key=lambda p: (p["t0_monotonic_ns"] or 0, p.get("pid", 0), p.get("pool", 0)))
    transports = {p["transport"] for p in pools}
    if len(transports) > 1:
        raise TraceError(f"{path}: pools of both transports ({', '.join(sorted(transports))}); record one server")
    start = min(p["t0_monotonic_ns"] or 0 for p in pools)
    streams = []
    total = 0
    for n, info in enumerate(pools):
        trace = os.path.join(path, os.path.basename(str(info["file"])))
        if os.path.isfile(trace) and os.path.getsize(trace) == 0:
            continue  # a pool whose recycler ticked but that never leased: a worker without traffic
        events = read_trace(trace, 1, max_events=max_events - total, idle_timeout=idle_timeout, keep_ids=True)
        total += len(events)
        interval = max(2, round(float(info["recycle_interval_s"]) * 1e9))
        shift = round(((info["t0_monotonic_ns"] or start) - start) / interval) * interval
        offsets = _offsets(trace)
        streams.append(_stream(events, offsets, n, shift, f"{info.get('pid', 0)}-{info.get('pool', n)}"))
    if not total:
        raise TraceError(f"{path}: no events: the recording's {len(pools)} pools leased nothing")
    out = Events(keep_ids=keep_ids, requests=requests)
    rec = Recording(path, pools)
    live: dict[str, int] = {}
    serial = 0
    for t, _, op, ident, nbytes, pool, offset in heapq.merge(*streams, key=lambda e: (e[0], e[1])):
        if op == ALLOC:
            worker = pool % workers if workers <= len(pools) else serial % workers
            live[ident] = serial
            out.alloc(t, serial, nbytes, worker, serial, ident=ident)
            rec.offsets.append(offset)
            rec.ids.append(ident)
            serial += 1
        else:
            out.free(t, live.pop(ident))
    return out, rec


def merged_lines(path: str, *, max_events: int = MAX_EVENTS) -> tuple[list[str], Recording]:
    """The recording as one trace (``trace --from record``): its lines, worker i the i-th pool, offsets kept."""
    count = len(glob.glob(os.path.join(glob.escape(path), "pool-*.json")))
    events, rec = read_recording(path, max(count, 1), max_events=max_events)
    lines = []
    allocs = 0
    ids = events.ids or []
    for t, op, key, nbytes, worker in zip(events.t, events.op, events.key, events.nbytes, events.worker, strict=True):
        head = f'{{"t": {t // 1_000_000_000}.{t % 1_000_000_000:09d}, '
        if op == ALLOC:
            body = {"op": "alloc", "id": ids[key], "bytes": nbytes, "worker": worker, "offset": rec.offsets[allocs]}
            allocs += 1
        else:
            body = {"op": "free", "id": ids[key]}
        lines.append(head + json.dumps(body)[1:] + "\n")
    return lines, rec


def _offsets(trace: str) -> list[int | None]:
    """The recorded offset of every alloc of a (valid) pool trace, in order."""
    out: list[int | None] = []
    with open(trace, "rb") as f:
        for raw in f:
            if b'"alloc"' in raw:
                offset = json.loads(raw).get("offset")
                out.append(offset if type(offset) is int else None)
    return out


def _stream(events: Events, offsets: list[int | None], n: int, shift: int, name: str) -> Any:
    ids = events.ids or []
    allocs = 0
    for t, op, key, nbytes in zip(events.t, events.op, events.key, events.nbytes, strict=True):
        ident = f"{name}:{ids[key]}"  # no '/': each lease a request of its own, as it was
        offset = None
        if op == ALLOC:
            offset = offsets[allocs] if allocs < len(offsets) else None
            allocs += 1
        yield t + shift, n, op, ident, nbytes, n, offset


def compare(rec: Recording, result: SimResult | None, granularity: int = DEFAULT_GRANULARITY) -> list[Finding]:
    """Whether the replay made the recorded pools' decisions: one finding, or none without ``--events``."""
    if result is None or result.offsets is None:
        return []
    first = rec.pools[0]
    incomplete = [
        f"pool {p.get('pid')}-{p.get('pool')}: {why}"
        for p in rec.pools
        for why in (
            "events were dropped" if p.get("dropped") else "",
            "its trace rotated (--max-bytes)" if p.get("events", {}).get("rotations") else "",
            "its process did not end cleanly" if not p.get("complete") else "",
        )
        if why
    ]
    if incomplete:
        return [Finding(Severity.warning, "record-not-compared", f"not compared with the recording: {incomplete[0]}")]
    layout = result.layout
    want = {
        "transport": first["transport"],
        "workers": len(rec.pools),
        "memory_size": first["layout"]["memory_size"],
        "data_start": first["layout"].get("data_start", 0),
        "recycle_ns": max(2, round(float(first["recycle_interval_s"]) * 1e9)),
    }
    have = {
        "transport": layout.transport,
        "workers": layout.workers,
        "memory_size": layout.memory_size,
        "data_start": layout.data_start,
        "recycle_ns": layout.recycle_ns,
    }
    if want != have:
        own = of_pools(rec.pools, granularity)  # the whole-MiB budget that splits into these pools
        differ = next(k for k in want if want[k] != have[k])
        how = (
            f"to compare with what the pools did, replay with {own.flags()}"
            if own.budget_mb is not None
            else f"mmpool cannot replay the recording's own pools: {own.unsplit()}"
        )
        return [
            Finding(
                Severity.info,
                "record-not-compared",
                f"the replay's {differ} ({have[differ]}) is not the recording's ({want[differ]}): {how}",
            )
        ]
    replayed = result.offsets
    differ_at = [i for i, (a, b) in enumerate(zip(rec.offsets, replayed, strict=False)) if a != b]
    if len(replayed) != len(rec.offsets) or differ_at:
        i = differ_at[0] if differ_at else min(len(replayed), len(rec.offsets))
        real = rec.offsets[i] if i < len(rec.offsets) else "none"
        sim = replayed[i] if i < len(replayed) else "none"
        return [
            Finding(
                Severity.error,
                "record-replay-differs",
                f"{len(differ_at)} of {len(rec.offsets)} allocations differ from what the recorded pools did; "
                f"the first, {rec.ids[i] if i < len(rec.ids) else i}: offset {_shown(real)} recorded, "
                f"{_shown(sim)} replayed",
            )
        ]
    misses = rec.offsets.count(None)
    return [
        Finding(
            Severity.info,
            "record-replay-matches",
            f"the replay made every decision the recorded pools made: {len(rec.offsets)} allocations, "
            f"{misses} misses, offset for offset",
        )
    ]


def _shown(offset: object) -> str:
    return "a miss" if offset is None else str(offset)


def layout_of(path: str, granularity: int = DEFAULT_GRANULARITY) -> RecordedLayout:
    """The recording's own layout, from its manifests alone (before its traces are read); TraceError if none."""
    manifests = sorted(glob.glob(os.path.join(glob.escape(path), "pool-*.json")))
    if not manifests:
        raise TraceError(f"{path}: no pool-*.json: not a recording of mmpool record, or no pool was recorded")
    if len(manifests) > MAX_POOLS:
        raise TraceError(f"{path}: {len(manifests)} pools; mmpool reads at most {MAX_POOLS}")
    pools = [_manifest(m) for m in manifests]
    pools.sort(key=lambda p: (p["t0_monotonic_ns"] or 0, p.get("pid", 0), p.get("pool", 0)))
    return of_pools(pools, granularity)
