"""The events of a simulation, held as compact columns rather than one Python tuple each.

A trace of ten million events as tuples takes gigabytes; as typed arrays it takes about 40 bytes
an event. Iterating an ``Events`` yields the engine's ``(t_ns, op, key, nbytes, worker)`` tuples
one at a time. Keys are small integers (one per lease); the trace's own ids are kept only when a
report needs them. Allocs of one request share a ``group``: the allocs of one worker at the same
``t`` whose ids share the part before the last ``/`` (``req7/img0`` and ``req7/img1``).
"""

from __future__ import annotations

from array import array
from collections.abc import Iterable, Iterator

ALLOC = 0
FREE = 1

# The largest bytes one event may carry: 16 TiB, far above any GPU. The cuda_ipc pool packs a range's
# start below its size in one integer key, so this is also the largest pool it models.
MAX_POOL_BYTES = 1 << 44

# One event: (t_ns, ALLOC, key, nbytes, worker) or (t_ns, FREE, key, 0, 0).
Event = tuple[int, int, object, int, int]


class Events:
    """Alloc and free events in time order, column by column.

    ``group`` (allocs: the request, frees: -1), ``pack`` (1 if the tensor is an image or video
    feature SGLang's cuda_vmm transport may pack with its request's others) and ``elem`` (its
    element size, for the packed layout) matter to cuda_vmm only.
    """

    __slots__ = ("t", "op", "key", "nbytes", "worker", "group", "pack", "elem", "ids")

    def __init__(self, keep_ids: bool = True, requests: bool = True) -> None:
        self.t = array("q")
        self.op = array("b")
        self.key = array("q")
        self.nbytes = array("q")
        self.worker = array("l")
        # without ``requests`` every alloc is a request of its own, of one 1-byte-element image feature
        self.group: array[int] | None = array("q") if requests else None
        self.pack: array[int] | None = array("b") if requests else None
        self.elem: array[int] | None = array("b") if requests else None
        self.ids: list[object] | None = [] if keep_ids else None

    def alloc(
        self,
        t: int,
        key: int,
        nbytes: int,
        worker: int,
        group: int,
        *,
        ident: object = None,
        pack: bool = True,
        elem: int = 1,
    ) -> None:
        self.t.append(t)
        self.op.append(ALLOC)
        self.key.append(key)
        self.nbytes.append(nbytes)
        self.worker.append(worker)
        if self.group is not None and self.pack is not None and self.elem is not None:
            self.group.append(group)
            self.pack.append(pack)
            self.elem.append(elem)
        if self.ids is not None:
            self.ids.append(key if ident is None else ident)

    def free(self, t: int, key: int) -> None:
        self.t.append(t)
        self.op.append(FREE)
        self.key.append(key)
        self.nbytes.append(0)
        self.worker.append(0)
        if self.group is not None and self.pack is not None and self.elem is not None:
            self.group.append(-1)
            self.pack.append(0)
            self.elem.append(0)

    def __len__(self) -> int:
        return len(self.t)

    def __iter__(self) -> Iterator[Event]:
        return zip(self.t, self.op, self.key, self.nbytes, self.worker, strict=True)

    def __getitem__(self, i: int) -> Event:
        return self.t[i], self.op[i], self.key[i], self.nbytes[i], self.worker[i]

    def with_ids(self) -> Iterator[Event]:
        """The events with the trace's own ids for keys (a key is its alloc's index)."""
        ids = self.ids
        if ids is None:
            yield from self
            return
        for t, op, key, nbytes, worker in self:
            yield t, op, ids[int(key)], nbytes, worker  # type: ignore[call-overload]

    @property
    def duration_ns(self) -> int:
        return self.t[-1] if self.t else 0


def request_of(ident: object) -> object:
    """The request an alloc's id names: the part before the last ``/`` (the whole id without one)."""
    if isinstance(ident, str):
        head, slash, _ = ident.rpartition("/")
        return head if slash else ident
    return ident


def as_events(events: Iterable[Event] | Events) -> Events:
    """``events`` as columns: keys renumbered per lease, requests grouped from the ids."""
    if isinstance(events, Events):
        return events
    out = Events()
    live: dict[object, int] = {}
    groups: dict[tuple[object, int], int] = {}
    at = -1
    serial = 0
    for t, op, key, nbytes, worker in events:
        if op == FREE:
            out.free(t, live.pop(key))
            continue
        if t != at:
            groups.clear()
            at = t
        group = groups.setdefault((request_of(key), worker), serial)
        live[key] = serial
        out.alloc(t, serial, nbytes, worker, group, ident=key)
        serial += 1
    return out
