"""Read a recording of ``mmpool record``: every pool's trace merged into one, and what the pools did.

A recording is a directory (``recfmt`` defines its files): per pool a manifest ``pool-<pid>-<n>.json``
(release, transport, layout, recycle interval) and its events, in its process's binary stream
(format 2) or, from older recordings, a trace of JSON lines (format 1); ``record_stream`` turns either
into the pool's trace on its tick clock, reading each file once. The pools are merged by shifting
each by whole intervals to where it started; worker i is the i-th pool to start. Comparing a replay
with the recorded offsets is the pools' (``pools.recorded``).
"""

from __future__ import annotations

import glob
import heapq
import json
import os
import stat
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from mmpool_cli._record.mmpool_record import recfmt
from mmpool_cli.core.words import count
from mmpool_cli.traces.bounded import MAX_LINE_BYTES
from mmpool_cli.traces.events import ALLOC, Events
from mmpool_cli.traces.jsonl import LAYOUT_KEY
from mmpool_cli.traces.parquet import is_parquet
from mmpool_cli.traces.reader import MAX_EVENTS, TraceError
from mmpool_cli.traces.record_stream import Damage, PoolTrace, damage_of, read_jsonl, read_stream
from mmpool_cli.traces.recorded_layout import DEFAULT_GRANULARITY, RecordedLayout, of_pools

MAX_POOLS = 1024  # SGLang's --tokenizer-worker-num is at most this in mmpool's plan
MAX_MANIFEST_BYTES = 1 << 20


@dataclass
class Recording:
    """The pools of one recording (manifests, in worker order) and the real offset of every alloc."""

    path: str
    pools: list[dict[str, Any]]
    offsets: list[int | None] = field(default_factory=list)  # per alloc of the merged trace, in order
    ids: list[str] = field(default_factory=list)
    traces: list[PoolTrace] = field(default_factory=list)  # in worker order, as ``pools``
    damage: list[Damage] = field(default_factory=list)  # the recording's files that are not whole, once each

    def source(self) -> dict[str, Any]:
        """What the report's ``source`` says of the recording."""
        first = self.pools[0]
        return {
            "recording": self.path,
            "pools": len(self.pools),
            "sglang": first.get(recfmt.K_SGLANG),
            "code_of": first.get(recfmt.K_CODE_OF),
            "transport": first.get(recfmt.K_TRANSPORT),
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
    formats = (recfmt.FORMAT_JSONL, recfmt.FORMAT_STREAM)
    if len(data) > MAX_MANIFEST_BYTES or not isinstance(info, dict) or info.get(recfmt.K_FORMAT) not in formats:
        raise TraceError(f"{path}: not a pool manifest of mmpool record (format 1 or 2)")
    needs = recfmt.K_FILE if info[recfmt.K_FORMAT] == recfmt.FORMAT_JSONL else recfmt.K_STREAM
    for key in (*recfmt.REQUIRED, needs):
        if key not in info:
            raise TraceError(f"{path}: the manifest has no {key!r}; was the recording cut short?")
    t0 = info[recfmt.K_T0]
    if type(t0) is not int or t0 < 0:  # never taken as 0: that would shift the pool by the machine's uptime
        raise TraceError(f"{path}: the manifest's {recfmt.K_T0} is {t0!r}, not a time; was the recording cut short?")
    if not isinstance(info[recfmt.K_LAYOUT], dict) or type(info[recfmt.K_LAYOUT].get("memory_size")) is not int:
        raise TraceError(f"{path}: the manifest's layout has no memory_size")
    return info


def _pool_manifests(path: str) -> tuple[list[str], list[dict[str, Any]]]:
    """The recording's pool manifests: their files, sorted, and what each holds; TraceError if none or too many."""
    if not os.path.isdir(path):
        what = "is a file, not a directory" if os.path.lexists(path) else "no such directory"
        raise TraceError(f"{path}: {what}; give the directory of a recording (mmpool record --out DIR)")
    manifests = sorted(glob.glob(os.path.join(glob.escape(path), recfmt.POOL_GLOB)))
    if not manifests:
        raise TraceError(f"{path}: no pool-*.json: not a recording of mmpool record, or no pool was recorded")
    if len(manifests) > MAX_POOLS:
        raise TraceError(f"{path}: {len(manifests)} pools; mmpool reads at most {MAX_POOLS}")
    return manifests, [_manifest(m) for m in manifests]


def read_pools(path: str, max_events: int = MAX_EVENTS) -> list[PoolTrace]:
    """Every pool of the recording at ``path`` as its trace, in the order the pools started; each file read once."""
    manifests, infos = _pool_manifests(path)
    transports = {p[recfmt.K_TRANSPORT] for p in infos}
    if len(transports) > 1:
        raise TraceError(f"{path}: pools of both transports ({', '.join(sorted(transports))}); record one server")
    traces: list[PoolTrace] = []
    streams: dict[str, dict[int, dict[str, Any]]] = {}
    for info in infos:
        if info[recfmt.K_FORMAT] == recfmt.FORMAT_JSONL:
            traces.append(read_jsonl(path, info, max_events))
        else:
            streams.setdefault(os.path.basename(str(info[recfmt.K_STREAM])), {})[int(info.get(recfmt.K_POOL, 0))] = info
    for stream, pools in streams.items():
        traces.extend(read_stream(path, stream, pools, max_events).values())
    for trace in traces:  # a pool of a stream whose parts were cut before its first event starts when it was made
        if trace.t0 is None:
            trace.t0 = trace.info[recfmt.K_T0]
    traces.sort(key=lambda p: (p.t0, p.info.get(recfmt.K_PID, 0), p.info.get(recfmt.K_POOL, 0)))
    return traces


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
    del idle_timeout  # a recording is files, read whole
    traces = read_pools(path, max_events)
    total = sum(len(p.events) for p in traces)
    if total > max_events:
        raise TraceError(f"{path}: more than {max_events} events; raise --max-events to read it")
    damage = damage_of(path, traces)
    if not total:
        broken = [d for d in damage if os.path.basename(d.path) != recfmt.RUN_MANIFEST]
        if broken:
            more = f" (and {count(len(broken) - 1, 'more damaged file')})" if len(broken) > 1 else ""
            raise TraceError(f"{path}: no events to read: {broken[0]}{more}")
        raise TraceError(f"{path}: no events: the recording's {len(traces)} pools leased nothing")
    start = min(int(p.t0 or 0) for p in traces)
    streams = []
    for n, trace in enumerate(traces):
        interval = recfmt.interval_ns(trace.info[recfmt.K_INTERVAL])
        shift = round((int(trace.t0 or 0) - start) / interval) * interval
        name = f"{trace.info.get(recfmt.K_PID, 0)}-{trace.info.get(recfmt.K_POOL, n)}"
        streams.append(_stream(trace, n, shift, name))
    pools = [p.info for p in traces]
    out = Events(keep_ids=keep_ids, requests=requests)
    rec = Recording(path, pools, traces=traces, damage=damage)
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
    """The recording as one trace (``trace --from DIR``): its lines, worker i the i-th pool, offsets kept."""
    found = len(glob.glob(os.path.join(glob.escape(path), recfmt.POOL_GLOB)))
    events, rec = read_recording(path, max(found, 1), max_events=max_events)
    lines = []
    allocs = 0
    ids = events.ids or []
    for t, op, key, nbytes, worker in zip(events.t, events.op, events.key, events.nbytes, events.worker, strict=True):
        head = f'{{"t": {recfmt.t_text(t)}, '
        if op == ALLOC:
            body = {"op": "alloc", "id": ids[key], "bytes": nbytes, "worker": worker, "offset": rec.offsets[allocs]}
            allocs += 1
        else:
            body = {"op": "free", "id": ids[key]}
        lines.append(head + json.dumps(body)[1:] + "\n")
    return lines, rec


def header_line(rec: Recording) -> str:
    """The merged trace's first line: the layout its pools had (``trace_layout`` reads it back), so that
    ``simulate --trace FILE`` replays the file at the recording's own layout, as ``--trace DIR`` does."""
    first = rec.pools[0]
    layout = {
        "pools": len(rec.pools),
        "transport": first[recfmt.K_TRANSPORT],
        "layout": first[recfmt.K_LAYOUT],
        "recycle_interval_s": first[recfmt.K_INTERVAL],
    }
    return json.dumps({LAYOUT_KEY: layout}) + "\n"


def trace_layout(path: str, granularity: int = DEFAULT_GRANULARITY) -> RecordedLayout | None:
    """The recording's layout that the trace file at ``path`` begins with (``header_line``), or None where it
    begins with none (a trace of traffic, one merged before mmpool wrote the layout, stdin, Parquet)."""
    if path == "-" or is_parquet(path):
        return None
    try:
        if not stat.S_ISREG(os.stat(path).st_mode):
            return None
        with open(path, "rb") as f:
            first = f.readline(MAX_LINE_BYTES + 1)
    except OSError:
        return None  # the trace's reader says what is wrong with it
    if not first.lstrip().startswith(b'{"' + LAYOUT_KEY.encode() + b'"'):
        return None
    where = f"{path}:1"
    try:
        header = json.loads(first)[LAYOUT_KEY]
        pools = header["pools"]
        manifest = {
            "file": where,
            recfmt.K_TRANSPORT: header["transport"],
            recfmt.K_LAYOUT: header["layout"],
            recfmt.K_INTERVAL: header["recycle_interval_s"],
        }
    except (ValueError, KeyError, TypeError) as e:
        what = "not the layout of a recording that mmpool trace --from DIR writes"
        raise TraceError(f"{where}: {what} ({type(e).__name__}: {e})") from None
    if type(pools) is not int or not 1 <= pools <= MAX_POOLS:
        raise TraceError(f"{where}: the recording's pools must be a whole number from 1 to {MAX_POOLS}, not {pools!r}")
    return of_pools([manifest] * pools, granularity)


def _stream(trace: PoolTrace, n: int, shift: int, name: str) -> Iterator[tuple[Any, ...]]:
    for t, op, key, nbytes, offset in trace.events:
        yield t + shift, n, op, f"{name}:{key}", nbytes, n, offset  # no '/': each lease a request of its own


def layout_of(path: str, granularity: int = DEFAULT_GRANULARITY) -> RecordedLayout:
    """The recording's own layout, from its manifests alone (before its traces are read); TraceError if none."""
    pools = _pool_manifests(path)[1]
    pools.sort(key=lambda p: (p[recfmt.K_T0], p.get(recfmt.K_PID, 0), p.get(recfmt.K_POOL, 0)))
    return of_pools(pools, granularity)
