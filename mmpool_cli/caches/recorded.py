"""A recorded multimodal cache (``mmpool record``) as the lookups ``caches.replay`` drives at any size.

The records are what the cache did at its own size, in the order the server called it
(``record_stream.read_caches``). SGLang's scheduler looks a batch's items up, then stores each
distinct miss (``mm_schedule.py``), and after a ``set`` that kept the entry it reads it back with
``get_single``: that read-back (a hit on the entry the insertion before it stored) is not traffic and
is not counted. A batch is the lookups up to the next insertion; a key looked up again before one
starts a new batch (SGLang looks a batch's item up once). A recording of SGLang 0.5.23's scheduler
marks where each batch began (``CACHE_BATCH``, written as each of ``mm_schedule.py``'s batch functions
starts): those are its batches, exact at every size. Without the marks (another release, an older
recording) a batch of hits only cannot be told from the next: it is read as one with it, exact at the
recorded size (hits move nothing but their keys) and counted (``joined``) so that a report can say
where other sizes may differ. An
entry's bytes are those its hit or its insertion recorded; an entry never admitted (larger than the
cache) has no bytes on record, so where there is one the replay stops at the recorded size, past
which its bytes would decide.
SGLang's preprocess cache (a tokenizer process's) is driven the same way by the Qwen-VL processor: a
request's items looked up (``get_if_present``), then one miss per distinct item missed, then each
computed miss stored; the records keep the request's order (``request_order``); an image repeated in a
request is one batch still; it reads nothing back, and bounds its entries too (``max_entries``).
Neutral: knows no engine; standard library only.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from mmpool_cli._record.mmpool_record import recfmt
from mmpool_cli.caches.replay import Lookups
from mmpool_cli.traces.reader import TraceError


@dataclass(frozen=True)
class RecordedCache:
    """One recorded cache: its size, its traffic's lookups, and the hits it made at its size."""

    name: str  # recfmt.CACHES: "embedding" or "preprocess"
    where: str  # "<pid>-<n>", as the manifest names it
    size_bytes: int  # SGLang's max_size when it was recorded
    lookups: Lookups
    hits: int  # the recorded hits of the traffic's lookups (read-backs after a set not counted)
    unsized: int  # distinct entries never admitted nor hit: their bytes are unknown past ``size_bytes``
    batches: int = 0
    joined: int = 0  # batches where a hit is followed by another lookup: maybe several of the server's


def recorded_lookups(info: dict[str, Any], events: list[tuple[int, int, int, int, int]]) -> RecordedCache:
    """The lookups of the cache whose manifest is ``info`` and records ``events``; TraceError where the
    records are not a scheduler's (an entry taken out, a store of a key never looked up)."""
    where = f"{info.get(recfmt.K_PID)}-{info.get(recfmt.K_POOL)}"
    size = info.get(recfmt.K_CACHE_BYTES)
    if type(size) is not int or size < 0:
        raise TraceError(f"cache {where}: the manifest's {recfmt.K_CACHE_BYTES} is {size!r}, not a size in bytes")
    name = str(info.get(recfmt.K_CACHE, ""))
    entries = info.get(recfmt.K_CACHE_ENTRIES, 0)
    if type(entries) is not int or entries < 0:
        raise TraceError(f"cache {where}: the manifest's {recfmt.K_CACHE_ENTRIES} is {entries!r}, not a count")
    reads_back = name == "embedding"  # the scheduler reads a stored embedding back; the processor does not
    weights = [1] * len(events)
    if name == "preprocess":
        events, weights = request_order(events)
    ids: dict[object, int] = {}  # a record's key (or a repeated lookup's own) -> its dense id
    bytes_of: dict[int, int] = {}
    keys: list[int] = []
    groups: list[int] = []
    batch, storing, hits = 0, True, 0
    joined: set[int] = set()
    hit_before = False  # a hit earlier in this batch: a batch of hits only may have ended there
    in_batch: set[int] = set()
    stored: int | None = None  # the key the record before stored, whose hit is SGLang's read-back
    ones: list[int] = []
    marked = any(e[1] == recfmt.CACHE_BATCH for e in events)  # the recording says where each batch began
    for (_t, kind, a, b, c), weight in zip(events, weights, strict=True):
        if kind == recfmt.CACHE_BATCH:
            batch, storing, in_batch, hit_before, stored = batch + 1, False, set(), False, None
        elif kind == recfmt.CACHE_LOOKUP:
            if b and stored == a and reads_back:
                stored = None
                continue
            stored = None
            if marked and a in in_batch and not b and reads_back:
                # SGLang looks an item up again in its batch only where its first lookup missed (mm_schedule.py
                # 379-401: the miss is not stored yet): a lookup that misses at every size and moves nothing,
                # an entry of its own of no bytes, never looked up again
                keys.append(ids.setdefault(("again", len(keys)), len(ids)))
                bytes_of[keys[-1]] = 0
                groups.append(batch)
                ones.append(weight)
                continue
            if marked:
                pass
            elif storing or (a in in_batch and reads_back):  # the processor looks a repeated image up again
                batch, storing, in_batch, hit_before = batch + 1, False, set(), False
            elif hit_before:
                joined.add(batch)
            hit_before = hit_before or bool(b)
            in_batch.add(a)
            key = ids.setdefault(a, len(ids))
            keys.append(key)
            groups.append(batch)
            ones.append(weight)
            if b:
                hits += 1
                bytes_of[key] = c
        elif kind == recfmt.CACHE_INSERT:
            storing, stored = True, None
            if a not in ids:
                if b > 0:
                    raise TraceError(
                        f"cache {where}: an entry stored without a lookup before it; mmpool replays a cache the "
                        "scheduler drives (a lookup, then a store of the miss)"
                    )
                continue  # not admitted (or there already): no change at any size up to the recorded one
            if b > 0:
                bytes_of[ids[a]] = b
                stored = a
        elif kind == recfmt.CACHE_FREE:
            raise TraceError(
                f"cache {where}: SGLang took entries out of it (free or clear); mmpool does not replay removals yet"
            )
        # an eviction comes between an insertion and its read-back: it changes nothing here
    sizes = [bytes_of.get(k, size + 1) for k in keys]  # never admitted at any size up to the recorded one
    unsized = len(ids) - len(bytes_of)
    return RecordedCache(
        name=name,
        where=where,
        size_bytes=size,
        lookups=Lookups(keys, sizes, ones, sizes, groups, max_entries=entries),
        hits=hits,
        unsized=unsized,
        batches=batch,
        joined=len(joined),
    )


Event = tuple[int, int, int, int, int]


def request_order(events: list[Event]) -> tuple[list[Event], list[int]]:
    """A preprocess cache's records with each miss where the request had its item, and the hits each
    lookup counts where it hits: the processor looks every item up (``get_if_present``: an absent one is
    a look the class does not count, recorded with bytes -1) before it claims the distinct misses
    together (``lookup_or_claim_many``: one counted miss each). Each counted lookup takes its key's first
    such look of the request and counts a hit for each (an image twice in a request is two hits where it
    hits); the looks themselves are dropped."""
    out: list[Event | None] = []
    weight: list[int] = []
    slot: dict[int, int] = {}  # key -> the place of its first uncounted look in this request
    for ev in events:
        _t, kind, a, b, c = ev
        if kind == recfmt.CACHE_LOOKUP:
            if b == 0 and c == -1:
                if a in slot and out[slot[a]] is None:
                    weight[slot[a]] += 1
                else:
                    slot[a] = len(out)
                    out.append(None)
                    weight.append(1)
                continue
            if a in slot and out[slot[a]] is None:
                out[slot[a]] = ev
                continue
        else:
            slot = {}  # a store (or a removal) ends the request's lookups
        out.append(ev)
        weight.append(1)
    kept = [i for i, ev in enumerate(out) if ev is not None]
    return [out[i] for i in kept], [weight[i] for i in kept]  # type: ignore[misc]
