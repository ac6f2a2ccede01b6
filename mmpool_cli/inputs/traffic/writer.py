"""Leases -> mmpool's JSON-lines trace (the ``simulate --trace`` format) and the simulator's events.

Pure core: standard library only.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from typing import NamedTuple, TextIO

from mmpool_cli.pools.replay import ALLOC, FREE, Event

NS_PER_S = 10**9


class Lease(NamedTuple):
    """One pooled tensor: leased at ``t_ns`` on ``worker``, acknowledged at ``free_ns``. A tuple: a log's
    hundreds of thousands are made without a frozen dataclass's per-field ``__setattr__``."""

    id: str
    t_ns: int
    nbytes: int
    worker: int
    item: str
    free_ns: int
    key: str | None = None  # the item's content key (``content_key``), where its data was read


def events(leases: Iterable[Lease]) -> list[Event]:
    """The alloc and free events of ``leases``, time-ordered (an alloc before its own free)."""
    timed: list[tuple[int, int, Event]] = []
    for n, lease in enumerate(leases):
        timed.append((lease.t_ns, 2 * n, (lease.t_ns, ALLOC, lease.id, lease.nbytes, lease.worker)))
        timed.append((lease.free_ns, 2 * n + 1, (lease.free_ns, FREE, lease.id, 0, 0)))
    timed.sort(key=lambda e: (e[0], e[1]))
    return [e for _, _, e in timed]


def seconds(ns: int) -> str:
    """Nanoseconds as exact decimal seconds: ``1500000000`` -> ``1.5``."""
    whole, frac = divmod(ns, NS_PER_S)
    return f"{whole}.{frac:09d}".rstrip("0").rstrip(".") if frac else str(whole)


def lines(timeline: Iterable[Event], items: dict[object, str], keys: dict[object, str] | None = None) -> Iterator[str]:
    """The trace's JSON lines for ``timeline``; ``items`` names each alloc id's item, ``keys`` its content key."""
    keys = keys or {}
    for t, op, key, nbytes, worker in timeline:
        stamp = seconds(t)
        ident = json.dumps(key, ensure_ascii=False)
        if op == FREE:
            yield f'{{"t": {stamp}, "op": "free", "id": {ident}}}'
        else:
            item = json.dumps(items.get(key, ""), ensure_ascii=False)
            head = f'{{"t": {stamp}, "op": "alloc", "id": {ident}, "bytes": {nbytes}'
            content = keys.get(key)
            tail = "" if content is None else f', "key": {json.dumps(content, ensure_ascii=False)}'
            yield f'{head}, "worker": {worker}, "item": {item}{tail}}}'


def write(
    out: TextIO, timeline: Iterable[Event], items: dict[object, str], keys: dict[object, str] | None = None
) -> int:
    """Write the trace to ``out``; returns the number of lines."""
    n = 0
    for line in lines(timeline, items, keys):
        out.write(line + "\n")
        n += 1
    return n
