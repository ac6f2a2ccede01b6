"""vLLM 0.34's encoder cache replayed over a sequence of requests, with ``EncoderCacheManager``'s rules.

The manager (``v1/core/encoder_cache_manager.py``) counts encoder embeddings (tokens). An item
already cached is shared: the request adds itself to the entry's references
(``check_and_update_cache``). Otherwise ``can_allocate`` admits it when it fits the step's compute
budget and the free slots, evicting unreferenced entries oldest first only if the free and
reclaimable slots together suffice. A finished request drops its references; an entry nobody
references is freed lazily, only when space is needed.

The order of admission is mmpool's model of the scheduler, which the traffic alone does not fix
(``ASSUMED``): requests in arrival order, first come first served; at most ``window`` requests hold
encoder entries at once (their prefills overlap), the oldest finishing first; a request's items are
scheduled in order, each step's compute budget the cache's size; where an item cannot be allocated
the items before it are allocated and the rest go in the next step, keeping their entries; a step
that schedules nothing waits for the oldest request to finish, and with nothing left to finish the
request is refused. ``scripts/record_vllm_cache_fixtures.py`` drives
vLLM's own manager under the same order. Pure core: standard library only.
"""

from __future__ import annotations

from array import array
from collections import OrderedDict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import accumulate, chain
from types import ModuleType
from typing import Any

from mmpool_cli.caches.curve import Curve, lru_curve
from mmpool_cli.kernels.native import compiled

FAST: ModuleType | None = compiled("_cachereplay")

ASSUMED = (
    "requests admitted first come first served, at most {window} holding encoder entries at once "
    "(the oldest finishes first); a request keeps its entries until it finishes"
)


class Manager:
    """``EncoderCacheManager``'s bookkeeping, keyed by item and request."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.free_slots = size
        self.freeable_slots = size
        self.refs: dict[str, set[int]] = {}  # cached: item -> requests referencing it
        self.tokens: dict[str, int] = {}  # num_embeds_by_hash
        # request -> its cached input ids, a set as vLLM keeps them (``free`` walks it in set order)
        self.request_ids: dict[int, set[int]] = {}
        self.request_keys: dict[int, dict[int, str]] = {}
        self.hash_refs: dict[int, dict[str, int]] = {}
        self.freeable: OrderedDict[str, int] = OrderedDict()
        self.freed: list[str] = []

    def check_and_update_cache(self, rid: int, input_id: int, key: str) -> bool:
        if key not in self.refs:
            return False
        if not self.refs[key]:
            self.freeable_slots -= self.freeable.pop(key)
        self.refs[key].add(rid)
        self._add_input(rid, input_id, key)
        return True

    def _add_input(self, rid: int, input_id: int, key: str) -> None:
        ids = self.request_ids.setdefault(rid, set())
        if input_id in ids:
            return
        ids.add(input_id)
        self.request_keys.setdefault(rid, {})[input_id] = key
        refs = self.hash_refs.setdefault(rid, {})
        refs[key] = refs.get(key, 0) + 1

    def can_allocate(self, tokens: int, compute_budget: int, scheduled: int) -> bool:
        if tokens > compute_budget:
            return False
        need = tokens + scheduled
        if need <= self.free_slots:
            return True
        if need > self.freeable_slots:
            return False
        while need > self.free_slots:
            key, n = self.freeable.popitem(last=False)
            del self.refs[key]
            del self.tokens[key]
            self.freed.append(key)
            self.free_slots += n
        return True

    def allocate(self, rid: int, input_id: int, key: str, tokens: int) -> None:
        self.refs.setdefault(key, set()).add(rid)
        self.tokens.setdefault(key, tokens)
        self._add_input(rid, input_id, key)
        self.free_slots -= tokens
        self.freeable_slots -= tokens

    def free(self, rid: int) -> None:
        """``free``: every input the request holds, as ``free_encoder_input`` drops them."""
        for input_id in list(self.request_ids.get(rid, ())):
            key = self.request_keys[rid].pop(input_id)
            self.request_ids[rid].remove(input_id)
            counts = self.hash_refs[rid]
            counts[key] -= 1
            if not counts[key]:
                del counts[key]
            if not self.request_ids[rid]:
                del self.request_ids[rid], self.request_keys[rid], self.hash_refs[rid]
            refs = self.refs.get(key)
            if not refs or key in self.hash_refs.get(rid, ()):
                continue
            refs.discard(rid)
            if not refs:
                self.freeable[key] = self.tokens[key]
                self.freeable_slots += self.tokens[key]

    def take_freed(self) -> list[str]:
        """``get_freed_mm_hashes``: evicted entries not allocated again since."""
        freed = [k for k in self.freed if k not in self.refs]
        self.freed = []
        return freed

    @property
    def occupied(self) -> int:
        """Tokens held by entries (referenced or waiting to be freed)."""
        return self.size - self.free_slots


@dataclass
class EncoderReplay:
    """The replay's decisions and its occupancy after each request's admission."""

    size: int
    window: int
    log: list[list[Any]] = field(default_factory=list)  # the fixture's vocabulary: alloc, hit, dup, wait, ...
    occupancy: list[int] = field(default_factory=list)
    waited: list[int] = field(default_factory=list)  # requests that waited for space
    refused: list[int] = field(default_factory=list)  # requests that never fit
    recomputed: int = 0  # tokens encoded again after their entry was evicted
    hits: int = 0  # items found in the cache (or scheduled already in the same step)
    saved: int = 0  # the tokens those hits did not encode

    @property
    def assumed(self) -> str:
        return ASSUMED.format(window=self.window)


def _ignore(entry: list[Any]) -> None:
    pass


@dataclass(frozen=True)
class Dense:
    """Requests as the compiled replay reads them: dense key ids, each request's start, per key its tokens."""

    keys: array[int]
    starts: array[int]
    tokens: array[int]

    @classmethod
    def of(cls, requests: Iterable[Sequence[str]], tokens: Mapping[str, int]) -> Dense:
        requests = list(requests)
        names = list(dict.fromkeys(chain.from_iterable(requests)))
        ids = {k: i for i, k in enumerate(names)}
        keys = array("q", map(ids.__getitem__, chain.from_iterable(requests)))
        starts = array("q", accumulate(map(len, requests), initial=0))
        return cls(keys, starts, array("q", map(tokens.__getitem__, names)))


def replay(
    requests: Iterable[Sequence[str]] | Dense,
    tokens: Mapping[str, int],
    size: int,
    window: int,
    *,
    log: bool = False,
    native: bool | None = None,
) -> EncoderReplay:
    """Replay ``requests`` (each its items' keys) through an encoder cache of ``size`` tokens; ``log``
    keeps every decision in the vocabulary of the fixtures (the curve's replays need only the counts).
    ``native`` None: the compiled replay where built and no log is asked (the same counts, waits,
    refusals and occupancy: ``tests/engines/vllm/test_encoder_replay.py``); ``requests`` may be given
    as a ``Dense`` made once for many replays (compiled only).

    >>> r = replay([["a"], ["b"], ["a"]], {"a": 60, "b": 50}, 100, 1)
    >>> r.waited, r.recomputed, r.occupancy
    ([], 60, [60, 50, 60])
    """
    if native is None:
        native = FAST is not None and not log
    if native or isinstance(requests, Dense):
        if FAST is None:
            raise RuntimeError("the compiled cache replay is not built")
        d = requests if isinstance(requests, Dense) else Dense.of(requests, tokens)
        hits, saved, recomputed, waited, refused, occupancy = FAST.refcounted(d.keys, d.starts, d.tokens, size, window)
        return EncoderReplay(size, window, [], occupancy, waited, refused, recomputed, hits, saved)
    m = Manager(size)
    out = EncoderReplay(size, window)
    inflight: list[int] = []
    evicted: set[str] = set()

    note = out.log.append if log else _ignore

    def finish() -> None:
        rid = inflight.pop(0)
        m.free(rid)
        note(["free", f"r{rid}", m.free_slots, m.freeable_slots])

    for rid, keys in enumerate(requests):
        name = f"r{rid}"
        if len(inflight) >= window:
            finish()
        start = 0
        while True:
            compute, scheduled, failed = size, 0, None
            seen: set[str] = set()
            to_alloc: list[int] = []
            dup: list[int] = []
            for i in range(start, len(keys)):
                key = keys[i]
                if key in seen:
                    dup.append(i)
                    continue
                if m.check_and_update_cache(rid, i, key):
                    note(["hit", name, i])
                    out.hits += 1
                    out.saved += tokens[key]
                    continue
                n = tokens[key]
                if not m.can_allocate(n, compute, scheduled):
                    failed = i
                    break
                scheduled += n
                compute -= n
                seen.add(key)
                to_alloc.append(i)
            for i in to_alloc:
                m.allocate(rid, i, keys[i], tokens[keys[i]])
                note(["alloc", name, i])
                if keys[i] in evicted:
                    out.recomputed += tokens[keys[i]]
            for i in dup:
                m.check_and_update_cache(rid, i, keys[i])
                note(["dup", name, i])
                out.hits += 1
                out.saved += tokens[keys[i]]
            freed = m.take_freed()
            evicted.update(freed)
            note(["freed", sorted(freed)])
            if failed is None:
                break
            if failed > start:  # some items were scheduled: the rest go in the next step
                note(["step", name, failed])
                start = failed
                continue
            if not inflight:
                note(["refuse", name, failed])
                out.refused.append(rid)
                break
            note(["wait", name, failed])
            if not out.waited or out.waited[-1] != rid:
                out.waited.append(rid)
            finish()
        inflight.append(rid)
        out.occupancy.append(m.occupied)
    return out


def no_wait_budget(
    requests: Iterable[Sequence[str]], tokens: Mapping[str, int], window: int, *, dense: Dense | None = None
) -> int:
    """The smallest budget at which no request waits or is refused, in one pass: the most tokens of
    distinct items in ``window`` requests in a row (at least 1).

    Why it is exact: with no wait so far, the requests in flight when one is admitted are the
    ``window - 1`` before it, and entries are referenced only by requests in flight. An item is
    admitted when the tokens referenced (the in-flight requests' items, the request's own so far)
    plus its own fit the budget (``can_allocate``: unreferenced entries are evicted as needed, and
    the compute budget, the whole budget per step, is never the tighter bound). So every request
    goes through at a budget of at least its window's distinct tokens; below the largest, the
    request whose window holds them fails an item, and a retry in the next step fails it again
    (what it allocated is still referenced), so it waits or is refused. ``tests/engines/vllm/
    test_encoder_replay.py`` checks it against the replay's bisection on random traffic.

    >>> no_wait_budget([["a"], ["b"], ["a", "b"]], {"a": 60, "b": 50}, 1)
    110
    """
    if dense is not None and FAST is not None:  # the same pass, compiled
        return max(int(FAST.window_peak(dense.keys, dense.starts, dense.tokens, window)), 1)
    held: dict[str, int] = {}  # item -> its occurrences in the window
    window_keys: list[Sequence[str]] = []
    total = peak = 0
    for keys in requests:
        window_keys.append(keys)
        for key in keys:
            held[key] = held.get(key, 0) + 1
            if held[key] == 1:
                total += tokens[key]
        peak = max(peak, total)
        if len(window_keys) == window:
            for key in window_keys.pop(0):
                held[key] -= 1
                if not held[key]:
                    del held[key]
                    total -= tokens[key]
    return max(peak, 1)


def curve_without_wait(requests: Iterable[Sequence[str]] | Dense, tokens: Mapping[str, int]) -> Curve:
    """Hits and tokens saved at every budget from ``no_wait_budget`` up, from one stack-distance pass:
    there the cache is a byte-counted LRU (in tokens) over the items in request order.

    Why: with no wait, a request's items go in one step, and the entries the requests in flight hold
    are the most recently used ones, which an LRU of that budget holds too (their distinct tokens fit).
    Unreferenced entries are evicted oldest released first, only as much as an item needs; they are
    released when the last request holding them finishes, in admission order, and a request frees its
    inputs in order: that is the order of their last use. A repeat in a request is a hit in both.
    ``tests/engines/vllm/test_encoder_replay.py`` checks it against the replay on random traffic.
    Below ``no_wait_budget`` requests wait, which reorders admissions: those budgets are replayed.
    """
    if isinstance(requests, Dense):
        n = array("q", [requests.tokens[k] for k in requests.keys])
        return lru_curve(requests.keys, n, None, n)
    ids: dict[str, int] = {}
    flat = [k for r in requests for k in r]
    keys = [ids.setdefault(k, len(ids)) for k in flat]
    n = array("q", [tokens[k] for k in flat])
    return lru_curve(keys, n, None, n)
