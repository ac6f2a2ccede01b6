"""A trace's events checked against what came before: time order, each free after its alloc, the limit.

Both readers of each format use it: the JSON-lines reader and the columnar one, when the compiled
reader (which checks alike, with the same codes) is not built.
"""

from __future__ import annotations

from mmpool_cli.traces.bounded import TraceError
from mmpool_cli.traces.events import ALLOC, Events, request_of
from mmpool_cli.traces.jsonl import seconds


class PythonColumns:
    """The pure-Python twin of the compiled reader's ``feed_columns``: rows whose fields are valid, paired."""

    def __init__(self, out: Events, name: str, max_events: int, requests: bool) -> None:
        self.out, self.name, self.max_events = out, name, max_events
        self.live: dict[object, int] = {}
        self.held: dict[object, tuple[int, int]] = {}  # the bytes and worker of each alloc in flight
        self.groups: dict[tuple[object, int], int] | None = {} if requests else None
        self.state = [0, -1, 0]

    def add(
        self, first: int, times: list[int], ops: list[int], ids: list[str], sizes: list[int], owners: list[int]
    ) -> None:
        """A free's size and owner: those its row gives, to match its alloc's (0 and -1 where none)."""
        held, stop, alloc = self.held, len(times), (0, 0)
        for i, key in enumerate(ids):
            if ops[i] == ALLOC:
                held[key] = (sizes[i], owners[i])
                continue
            found = held.pop(key, None)  # None: no alloc in flight, which the pairing below refuses
            if found and ((sizes[i] and sizes[i] != found[0]) or (owners[i] >= 0 and owners[i] != found[1])):
                stop, alloc = i, found
                break
        if stop >= self.max_events - len(self.out):
            stop = len(times)  # a row too many comes first
        # a free's event holds neither; the pairing's errors come before this one
        event_sizes = [0 if op else n for n, op in zip(sizes[:stop], ops, strict=False)]
        event_owners = [0 if op else w for w, op in zip(owners[:stop], ops, strict=False)]
        parsed = (range(first, first + stop), times[:stop], ops[:stop], ids[:stop], event_sizes, event_owners)
        extend(self.out, parsed, self.name, self.max_events, self.live, self.groups, self.state)
        if stop < len(times):
            raise TraceError(f"{self.name}:{first + stop}: {differs(ids[stop], sizes[stop], owners[stop], alloc)}")


def extend(out, parsed, name, max_events, live, groups, state) -> None:  # type: ignore[no-untyped-def]
    """Check a batch's events against what came before and append them to ``out``'s columns."""
    linenos, times, ops, keys, sizes, owners = parsed
    if len(out) + len(times) > max_events:
        room = max_events - len(out)  # the events before the first one too many are checked first
        extend(out, [c[:room] for c in parsed], name, max_events, live, groups, state)
        raise TraceError(f"{name}:{linenos[room]}: {TOO_MANY.format(max_events)}")
    serials: list[int] = []
    group_of: list[int] = []
    previous, at, serial = state
    get = live.get
    add_serial, add_group = serials.append, group_of.append
    for i, t in enumerate(times):
        if t < previous:
            raise TraceError(f"{name}:{linenos[i]}: {refusal(BACKWARDS, t, previous, None)}")
        previous = t
        key = keys[i]
        found = get(key, -1)
        if ops[i] == ALLOC:
            if found >= 0:
                raise TraceError(f"{name}:{linenos[i]}: {refusal(IN_FLIGHT, t, previous, key)}")
            live[key] = serial
            if groups is not None:
                if t != at:
                    groups.clear()
                    at = t
                add_group(groups.setdefault((request_of(key), owners[i]), serial))
            add_serial(serial)
            serial += 1
            continue
        if found < 0:
            code = FREED if key in live else UNKNOWN
            raise TraceError(f"{name}:{linenos[i]}: {refusal(code, t, previous, key)}")
        live[key] = -1
        add_serial(found)
        if groups is not None:
            add_group(-1)
    if out.ids is not None:
        out.ids.extend(k for k, op in zip(keys, ops, strict=True) if op == ALLOC)
    state[:] = [previous, at, serial]
    out.t.extend(times)
    out.op.extend(ops)
    out.key.extend(serials)
    out.nbytes.extend(sizes)
    out.worker.extend(owners)
    if out.group is not None and out.pack is not None and out.elem is not None:
        out.group.extend(group_of)
        out.pack.extend([1 - op for op in ops])  # a trace's features count as image features
        out.elem.extend([1 - op for op in ops])  # of 1-byte elements


# why an event is refused after what came before: the compiled reader's codes, which it exports as its
# REFUSALS (tests/pools/test_native.py holds the two equal). GONE: a free of an id not in flight, from a
# reader that replays as it reads and keeps no freed ids (FREED or UNKNOWN, which the caller tells apart
# by looking back); DIFFERS: a free whose row gives bytes or a worker not its alloc's; FIELD: a columnar
# trace's row with a field a JSON line could not have (trace_parquet says which)
BACKWARDS, IN_FLIGHT, FREED, UNKNOWN, TOO_MANY_CODE, FIELD, GONE, DIFFERS = 1, 2, 3, 4, 5, 6, 7, 8
REFUSALS = {
    "BACKWARDS": BACKWARDS,
    "IN_FLIGHT": IN_FLIGHT,
    "FREED": FREED,
    "UNKNOWN": UNKNOWN,
    "TOO_MANY": TOO_MANY_CODE,
    "FIELD": FIELD,
    "GONE": GONE,
    "DIFFERS": DIFFERS,
}
TOO_MANY = "more than {} events; split the trace or raise --max-events"


def refusal(code: int, t: int, previous: int, key: object) -> str:
    if code == BACKWARDS:
        return f"t={seconds(t)} s comes before the previous event's t={seconds(previous)} s; sort the trace by t"
    if code == IN_FLIGHT:
        return f"alloc of id {key!r}, which is still in flight (its free has not come)"
    if code == FREED:
        return f"free of id {key!r}, which was already freed"
    return f"free of unknown id {key!r}: no alloc before it names it"


def differs(key: object, nbytes: int, worker: int, alloc: tuple[int, int]) -> str:
    """What is wrong with a free that gives ``nbytes`` or ``worker`` (0 and -1: none) other than its
    alloc's (bytes, worker)."""
    if nbytes and nbytes != alloc[0]:
        given = f"bytes {nbytes}, its alloc {alloc[0]}"
    else:
        given = f"worker {worker}, its alloc {alloc[1]}"
    return f"free of id {key!r} gives {given}; a free's bytes and worker are null or its alloc's"
