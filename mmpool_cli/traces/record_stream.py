"""Turn a recording's pools into traces: the binary stream of format 2, the JSON lines of format 1.

Each pool's trace is on its tick clock (what the hook's writer did in the server before format 2,
done here, off the server): SGLang's recycler gives leases back only at its ticks, and ``mmpool
simulate`` ticks at 0, I, 2I, ... So the k-th tick the pool ran is at exactly k*I, a lease it gave
back is freed at k*I, and an allocation between ticks k and k+1 is at k*I plus its real time since
tick k (capped below I, keeping order). A replay at the pool's own layout then makes every
decision the pool made, in its order. A miss has no lifetime: it is freed at the next tick.

A stream's parts are read in order from the newest run of consecutive parts; the first one read
starts from the leases its pools held (``HELD``), later ones only continue. So every part reads
alone, and all of them read as the stream would unrotated.
"""

from __future__ import annotations

import glob
import json
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from typing import Any

from mmpool_cli._record.mmpool_record import recfmt
from mmpool_cli.core.words import count
from mmpool_cli.traces.bounded import TraceError
from mmpool_cli.traces.events import ALLOC, FREE, MAX_POOL_BYTES

MAX_PARTS = 1 << 20
MAX_RUN_BYTES = 1 << 20  # recording.json: a command line and a few numbers


@dataclass
class PoolTrace:
    """One pool's events on its tick clock: (t, op, id, bytes, offset); offset None for a free or a miss."""

    info: dict[str, Any]
    events: list[tuple[int, int, str, int, int | None]] = field(default_factory=list)
    t0: int | None = None  # CLOCK_MONOTONIC ns of the clock's 0
    complete: bool = False  # the process wrote its END
    whole: bool = True  # read from the stream's first part (no earlier part missing)
    parts: int = 1
    damage: list[Damage] = field(default_factory=list)  # its stream's files that are not whole


class _Clock:
    """One pool's tick clock, and the leases it holds."""

    def __init__(self, out: PoolTrace, vmm: bool, control: int, interval: int) -> None:
        self.out, self.vmm, self.control, self.interval = out, vmm, control, interval
        self.k, self.rk, self.last, self.serial = 0, -1, 0, 0
        self.in_tick = False  # between a cuda_ipc tick's TICK and TICK_END
        self.live: dict[int, str] = {}  # start -> id
        self.misses: list[str] = []

    def clock(self, r: int) -> int:
        if self.rk < 0:  # the first event: the clock's 0 just before it
            self.rk = r - 1
            self.out.t0 = self.rk
        return self.k * self.interval + min(max(r - self.rk, 1), self.interval - 1)

    def put(self, t: int, op: int, key: str, nbytes: int, offset: int | None) -> None:
        self.last = max(self.last, t)
        self.out.events.append((self.last, op, key, nbytes, offset))

    def alloc(self, r: int, asked: int, start: int, where: str) -> None:
        nbytes = asked - self.control if self.vmm else asked  # cuda_vmm: its data bytes
        if not 0 < nbytes <= MAX_POOL_BYTES or start < -1 or start > MAX_POOL_BYTES:
            raise TraceError(f"{where}: an allocation of {nbytes} bytes at {start}: not a recording's record")
        t = self.clock(r)
        key = str(self.serial)
        self.serial += 1
        if start < 0:
            self.misses.append(key)
            self.put(t, ALLOC, key, nbytes, None)
        else:
            self.live[start] = key
            self.put(t, ALLOC, key, nbytes, start + self.control)

    def release(self, r: int, start: int, tick: bool) -> None:
        key = self.live.pop(start, None)
        if key is not None:  # else its alloc came before the recording (or was dropped)
            self.put(self.k * self.interval if tick else self.clock(r), FREE, key, 0, None)

    def tick(self, r: int) -> None:
        self.clock(r)
        self.k += 1
        self.rk = r
        for key in self.misses:
            self.put(self.k * self.interval, FREE, key, 0, None)
        self.misses.clear()


def stream_parts(directory: str, stream: str) -> list[tuple[int, str]]:
    """The parts of ``stream`` to read, in order: the newest run of consecutive ones."""
    found = sorted(
        (n, os.path.join(directory, name))
        for name in os.listdir(directory)
        if (n := recfmt.part_number(stream, name)) is not None
    )
    if len(found) > MAX_PARTS:
        raise TraceError(f"{directory}: {len(found)} parts of {stream}; mmpool reads at most {MAX_PARTS}")
    run: list[tuple[int, str]] = []
    for n, path in found:
        run = run + [(n, path)] if run and run[-1][0] == n - 1 else [(n, path)]
    return run


def read_stream(directory: str, stream: str, infos: dict[int, dict[str, Any]], max_events: int) -> dict[int, PoolTrace]:
    """The traces of the pools (index -> manifest) of one process's stream, read once."""
    parts = stream_parts(directory, stream)
    if not parts:
        raise TraceError(f"{directory}: no {recfmt.part_name(stream, 0)}: the recording's events are missing")
    out = {i: PoolTrace(info, whole=parts[0][0] == 0, parts=len(parts)) for i, info in infos.items()}
    clocks: dict[int, _Clock] = {}
    for i, info in infos.items():
        layout = info[recfmt.K_LAYOUT]
        vmm = info[recfmt.K_TRANSPORT] == "cuda_vmm"
        control = int(layout.get("control_bytes", 0)) if vmm else 0
        clocks[i] = _Clock(out[i], vmm, control, recfmt.interval_ns(info[recfmt.K_INTERVAL]))
    by_key: dict[int, _Clock] = {}
    started: set[int] = set()  # pools whose first read record has passed: a later HELD only continues
    read, ended = 0, False
    walk = _Stream(parts)
    for path, records in walk:
        read += len(records)
        if read > max_events * 2 + 1024:
            raise TraceError(f"{directory}: more than {max_events} events; raise --max-events to read it")
        for kind, key, r, a, b, _c in records:
            where = f"{path}: record of kind {kind}"
            if kind == recfmt.REGISTER:
                if a in clocks:
                    by_key[key] = clocks[a]
                continue
            if kind == recfmt.END:
                ended = True
                continue
            clock = by_key.get(key)
            if clock is None:
                continue  # a pool whose manifest is not here
            if kind == recfmt.HELD:
                if id(clock) not in started:
                    clock.alloc(r, a, b, where)
                continue
            started.add(id(clock))
            if kind == recfmt.ALLOC:
                clock.alloc(r, a, b, where)
            elif kind == recfmt.RELEASE:
                clock.release(r, a, clock.in_tick)
            elif kind == recfmt.TICK:
                clock.tick(r)
                clock.in_tick = not clock.vmm  # a cuda_ipc tick's releases follow it, up to its TICK_END
            elif kind == recfmt.TICK_END:
                clock.in_tick = False
            elif kind == recfmt.TICK_FREE:
                clock.release(r, a, True)
            else:
                raise TraceError(f"{where}: not a record of mmpool record (kinds 1 to {recfmt.END})")
    damage = walk.ended(ended)
    for trace in out.values():
        trace.complete = ended
        trace.damage = damage
    return out


Record = tuple[int, int, int, int, int, int]


@dataclass(frozen=True)
class Damage:
    """A file of a recording that is not whole: its path, and what is wrong with it and what of it is read."""

    path: str
    what: str

    def __str__(self) -> str:
        return f"{self.path}: {self.what}"


class _Stream:
    """One process's event stream, its parts read in turn; the damage of its files noted as they are read."""

    def __init__(self, parts: list[tuple[int, str]]) -> None:
        self.parts = parts
        self.damage: list[Damage] = []
        self._last: tuple[str, int, int] = ("", 0, 0)  # the last part: its path, its bytes, its cut (-1: none)

    def __iter__(self) -> Iterator[tuple[str, list[Record]]]:
        for n, path in self.parts:
            records, damage, size, cut = _records(path, n)
            if damage is not None:
                self.damage.append(damage)
            self._last = (path, size, cut)
            yield path, records

    def ended(self, ended: bool) -> list[Damage]:
        """The damage of the stream's files, its last part's missing END (``ended`` False) among it."""
        path, size, cut = self._last
        if ended or not path:
            return self.damage
        if cut > 0:  # the cut already named: what it means for the stream is said on the same line
            last = self.damage.pop()
            return [*self.damage, Damage(last.path, f"{last.what}, and its process's END record is missing")]
        if cut == 0:  # nothing of it was read: it says so already
            return self.damage
        return [
            *self.damage,
            Damage(
                path,
                f"ends at byte {size:,} without the END record its process writes when it ends cleanly (it was "
                "killed or is still running, or the file was cut)",
            ),
        ]


def _records(path: str, part: int) -> tuple[list[Record], Damage | None, int, int]:
    """A part's whole records, what is wrong with its file, its bytes, and its cut (-1: none; 0: in its header)."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as e:
        raise TraceError(f"{path}: cannot read ({e.strerror or e})") from None
    size, head = recfmt.RECORD.size, recfmt.HEADER.size
    if len(data) < head:  # created, never written (a process killed at once), or cut there
        what = "empty (0 bytes)" if not data else f"cut inside its {head}-byte header ({count(len(data), 'byte')})"
        return [], Damage(path, f"{what}: none of its events are read"), len(data), 0
    magic, version, number, _pid, _, _ = recfmt.HEADER.unpack_from(data)
    if magic != recfmt.MAGIC or version != recfmt.STREAM_VERSION or number != part:
        raise TraceError(f"{path}: not part {part} of an mmpool recording's event stream (version {version})")
    whole = (len(data) - head) // size * size  # a record cut by a kill (or a copy) is not read
    records = list(recfmt.RECORD.iter_unpack(memoryview(data)[head : head + whole]))
    rest = len(data) - head - whole
    if not rest:
        return records, None, len(data), -1
    read, lost = ("is" if len(records) == 1 else "are"), ("is" if rest == 1 else "are")
    damage = Damage(
        path,
        f"cut inside a record at byte {head + whole:,} of {len(data):,}: the {count(len(records), 'record')} before "
        f"it {read} read, the {count(rest, 'byte')} after {lost} not",
    )
    return records, damage, len(data), head + whole


def read_jsonl(directory: str, info: dict[str, Any], max_events: int) -> PoolTrace:
    """A format-1 pool's trace (JSON lines written by the hook's writer), read once."""
    path = os.path.join(directory, os.path.basename(str(info.get(recfmt.K_FILE, ""))))
    out = PoolTrace(info, t0=info[recfmt.K_T0], complete=bool(info.get(recfmt.K_COMPLETE)))
    out.whole = not info.get(recfmt.K_EVENTS, {}).get("rotations")
    if os.path.isfile(path) and os.path.getsize(path) == 0:
        return out  # a pool whose recycler ticked but that never leased: a worker without traffic
    live: set[str] = set()
    last = 0
    # a rotated format-1 trace began with its leases in flight, one short or one twice (issue 36):
    # read as a user would expect, the missing alloc's free and the repeated alloc left out
    lenient = not out.whole
    try:
        with open(path, "rb") as f:
            for lineno, raw in enumerate(f, 1):
                where = f"{path}:{lineno}"
                try:
                    e = json.loads(raw, parse_float=Decimal)
                    t, op, key = int(Decimal(e["t"]) * 1_000_000_000), e["op"], str(e["id"])
                except (ValueError, KeyError, TypeError, InvalidOperation):
                    raise TraceError(f"{where}: not a line of mmpool record's trace") from None
                if t < last:
                    raise TraceError(f"{where}: t goes back in time")
                last = t
                if op == "alloc":
                    nbytes, offset = e.get("bytes"), e.get("offset")
                    if lenient and key in live:
                        continue
                    if type(nbytes) is not int or not 0 < nbytes <= MAX_POOL_BYTES:
                        raise TraceError(
                            f"{where}: bytes must be a whole number from 1 to {MAX_POOL_BYTES}, not {nbytes}"
                        )
                    if key in live:
                        raise TraceError(f"{where}: alloc of id {key!r}, which is still in flight")
                    live.add(key)
                    out.events.append((t, ALLOC, key, nbytes, offset if type(offset) is int else None))
                elif op == "free" and key in live:
                    live.discard(key)
                    out.events.append((t, FREE, key, 0, None))
                elif op == "free" and lenient:
                    continue
                else:
                    raise TraceError(f"{where}: free of unknown id {key!r}: no alloc before it names it")
                if len(out.events) > max_events:
                    raise TraceError(f"{path}: more than {max_events} events; raise --max-events to read it")
    except OSError as e:
        raise TraceError(f"{path}: cannot read ({e.strerror or e})") from None
    return out


def run_damage(directory: str) -> list[Damage]:
    """``recording.json`` where it is there but not what ``mmpool record`` writes (cut short, overwritten)."""
    path = os.path.join(directory, recfmt.RUN_MANIFEST)
    try:
        with open(path, "rb") as f:
            data = f.read(MAX_RUN_BYTES + 1)
    except FileNotFoundError:
        return []  # the hook alone (MMPOOL_RECORD set by hand) writes none
    except OSError as e:
        return [Damage(path, f"cannot be read ({e.strerror or e}); the pools' own files are read without it")]
    why = ""
    if len(data) > MAX_RUN_BYTES:
        why = "over 1 MiB"
    else:
        try:
            info = json.loads(data)
        except ValueError as e:
            why = f"not JSON: {e}" if data.strip() else f"{count(len(data), 'byte')}, no JSON"
        else:
            if not isinstance(info, dict) or info.get("format") != recfmt.RUN_FORMAT:
                why = f"not an object of format {recfmt.RUN_FORMAT}"
    if not why:
        return []
    what = f"not the run's manifest that mmpool record wrote ({why}): cut short or overwritten"
    return [Damage(path, f"{what}; the pools' own files are read without it")]


def damage_of(directory: str, traces: list[PoolTrace] | list[CacheTrace]) -> list[Damage]:
    """The recording's files that are not whole, once each: the run's manifest, then the streams' parts."""
    seen: dict[Damage, None] = dict.fromkeys(run_damage(directory))
    for trace in traces:
        seen.update(dict.fromkeys(trace.damage))
    return list(seen)


@dataclass
class CacheTrace:
    """One multimodal cache's records, in order: (t, kind, a, b, c) as ``recfmt`` defines the cache kinds."""

    info: dict[str, Any]
    events: list[tuple[int, int, int, int, int]] = field(default_factory=list)
    damage: list[Damage] = field(default_factory=list)  # its stream's files that are not whole


def read_caches(directory: str, max_events: int) -> list[CacheTrace]:
    """Every multimodal cache of the recording at ``directory`` (``cache-*.json``), its records read once."""
    found: dict[str, dict[int, CacheTrace]] = {}
    for path in sorted(glob.glob(os.path.join(glob.escape(directory), recfmt.CACHE_GLOB))):
        try:
            with open(path, encoding="utf-8") as f:
                info = json.load(f)
            stream, index = os.path.basename(str(info[recfmt.K_STREAM])), int(info[recfmt.K_POOL])
        except (OSError, ValueError, KeyError, TypeError):
            raise TraceError(f"{path}: not a cache manifest of mmpool record") from None
        found.setdefault(stream, {})[index] = CacheTrace(info)
    kinds = recfmt.CACHE_KINDS
    read = 0
    for stream, caches in found.items():
        by_key: dict[int, CacheTrace] = {}
        walk, ended = _Stream(stream_parts(directory, stream)), False
        for _path, records in walk:
            for kind, key, t, a, b, c in records:
                if kind == recfmt.CACHE_REGISTER and a in caches:
                    by_key[key] = caches[a]
                elif kind in kinds and key in by_key:
                    by_key[key].events.append((t, kind, a, b, c))
                    read += 1
                    if read > max_events:
                        raise TraceError(f"{directory}: more than {max_events} cache events")
                elif kind == recfmt.END:
                    ended = True
        damage = walk.ended(ended)
        for trace in caches.values():
            trace.damage = damage
    return [trace for caches in found.values() for trace in caches.values()]
