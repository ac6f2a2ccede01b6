"""The prefix cache in front of the KV cache, replayed exactly: a radix tree or chained block hashes.

Two rules, each the one its engine runs (checked against their own classes by
``scripts/record_prefix_fixtures.py``); neutral: the names below are rules, not engines.

``Radix`` -- SGLang's ``RadixCache`` (0.5.23, ``mem_cache/radix_cache.py``) with its default LRU
policy, driven as its scheduler drives it. A request's prompt is matched up to ``len - 1`` tokens,
page-aligned (``_compute_max_prefix_len``); the matched node is locked; the uncached tokens are
allocated, evicting first (``evict_to_free_tokens``: the shortfall, whole unlocked leaves by last
access, a parent pushed when its last child goes); the prompt is inserted (``checkpoint`` at
prefill), the duplicate slots freed, the path re-matched and locked. At its release its output's
KV (``len(output) - 1`` tokens: the last token's is never computed) is allocated the same way, then
the prompt and those output tokens are inserted and split at the prompt boundary (``checkpoint``
with ``split_prompt``), the path re-matched, the tail of a partial page freed and the lock dropped
(``release_kv_cache``). Node extents, splits made by matching and inserting, and the order of
access times (one clock tick where SGLang reads ``time.monotonic()``) are the tree's own, so the
same leaves go in the same order. ``capacity_tokens`` is the token pool's size
(``--max-total-tokens``); with ``page_size`` > 1 the pool is its whole pages (``size //
page_size``), the allocations are in pages, the extend evicts for one page beyond its tokens and a
decode step for one page, as the paged allocator asks, and a partial last page stays the request's
until its release.

``Blocks`` -- vLLM v1's prefix caching (0.34.0, ``v1/core/kv_cache_manager.py``, ``block_pool.py``,
``kv_cache_utils.py``), one full-attention group. Full blocks of ``block_size`` tokens are keyed by
their parent's key, their tokens and the multimodal items overlapping them (each item's hash and
its offset in the block: ``_gen_mm_extra_hash_keys``); a hit is the longest chain of cached keys
within ``len - 1`` tokens (``get_max_cache_hit_length``). ``num_blocks`` is ``num_gpu_blocks``,
one of which is the null block, never lent. Hit blocks are taken out of the free queue
(``touch``); new blocks are popped from its head, a cached one losing its key; full blocks are
cached as they fill (a key already cached gets a duplicate block: vLLM does not de-duplicate, and a
lookup finds the first block cached under the key); at a release the request's blocks are freed
last block first, unkeyed ones to the head of the queue, keyed ones to its tail.

Assumed, for both (what a replay cannot know from tokens alone): each request is admitted alone
at ``arrive`` with its whole prompt in one prefill (no chunking, no batching with others, no
waiting queue: the scheduler's choice of when to admit is the traffic's ``arrive``); its decode
steps' KV is taken at ``finish``, just before its release; events at one time: releases before
admissions, ties in input order (a request with ``finish == arrive`` is released right after its
admission). Where the running requests alone hold more than the capacity, the engine would make
a request wait; the replay runs it anyway, over the capacity, once everything unlocked is evicted
(``Replay.over`` counts those admissions and releases).

The curve replays each point: running requests lock what they hold, a radix leaf is evicted
whole with extents that depend on what was evicted before, and vLLM's hits are chains with
duplicate blocks -- none keeps the inclusion property a one-pass stack-distance method needs, so
no single pass gives every size exactly. One unbounded replay finds the size from which nothing
is ever evicted; every point at or above it is that replay's answer.
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass

from mmpool_cli.caches import radix
from mmpool_cli.caches.blocks import BlockReplay, KeyMemo
from mmpool_cli.core.collector import paused


@dataclass(frozen=True, slots=True)
class PrefixRequest:
    """One request as the prefix cache sees it."""

    tokens: Sequence[int]  # the prompt's token ids, each image's placeholders as the engine pads them
    output: Sequence[int] = ()  # the generated tokens, where known: inserted with the prompt
    extra: Sequence[tuple[int, int, str]] = ()  # (start, length, hash) of each multimodal item's span
    arrive: int = 0  # admission time (ns since the first request; ties: input order)
    finish: int = 0  # release time, same clock; finish >= arrive


@dataclass(frozen=True, slots=True)
class Radix:
    """SGLang's ``RadixCache``: a token pool of ``capacity_tokens`` slots in pages of ``page_size``."""

    capacity_tokens: int
    page_size: int = 1


@dataclass(frozen=True, slots=True)
class Blocks:
    """vLLM v1's block-hash prefix caching: ``num_blocks`` (``num_gpu_blocks``) of ``block_size`` tokens."""

    num_blocks: int
    block_size: int = 16


@dataclass(frozen=True, slots=True)
class Replay:
    """What one replay found: per request (input order) the prompt tokens served from the cache."""

    served: list[int]
    evicted: bool  # whether anything cached was ever evicted
    over: int  # admissions and releases that ran over the capacity


def replay(
    requests: Sequence[PrefixRequest], cache: Radix | Blocks, order: list[tuple[int, int, int, int]] | None = None
) -> list[int]:
    """Per request (input order), the prompt tokens served from the cache at its admission; ``order``:
    ``events(requests)``, where it was made already (one order for every capacity)."""
    return run(requests, cache, order).served


def run(
    requests: Sequence[PrefixRequest], cache: Radix | Blocks, order: list[tuple[int, int, int, int]] | None = None
) -> Replay:
    """The replay of ``requests`` through ``cache``, with whether it evicted or ran over."""
    _check_cache(cache)
    with no_collection():
        if order is None:
            order = _events(requests)
        if isinstance(cache, Radix):
            return Replay(*radix.replay(requests, order, cache.capacity_tokens, cache.page_size)[:3])
        return Replay(*BlockReplay(cache.num_blocks, cache.block_size).run(requests, order))


def no_collection() -> AbstractContextManager[None]:
    """The cyclic collector off: a replay (or the building of its prompts) makes millions of small
    objects (nodes, keys, token lists) and no reference cycle that outlives it; the collector's
    passes over them cost a fifth to a third of its time, and find nothing."""
    return paused()


def events(requests: Sequence[PrefixRequest]) -> radix.Events:
    """The admissions and releases every replay of ``requests`` walks, in time order (checked)."""
    with no_collection():
        return _events(requests)


def never_evicts(
    requests: Sequence[PrefixRequest],
    kind: type[Radix] | type[Blocks],
    order: list[tuple[int, int, int, int]] | None = None,
    **params: int,
) -> int:
    """The smallest capacity (tokens for Radix, blocks for Blocks) at which the replay of
    ``requests`` evicts nothing; every capacity from it up serves what the unbounded cache serves."""
    if order is None:
        order = events(requests)
    return _unbounded(requests, order, kind, params)[0]


def _unbounded(
    requests: Sequence[PrefixRequest],
    order: list[tuple[int, int, int, int]],
    kind: type[Radix] | type[Blocks],
    params: dict[str, int],
    memo: KeyMemo | None = None,
) -> tuple[int, int]:
    """``(never_evicts, tokens served)`` of the replay in a cache that never fills."""
    _check_cache(kind(1, **params))
    with no_collection():
        if kind is Radix:
            page = params.get("page_size", 1)
            served, _, _, peak = radix.replay(requests, order, None, page)
            return -(-peak // page) * page, sum(served)  # the pool holds whole pages
        return BlockReplay(None, params.get("block_size", 16), memo).peak_after(requests, order)


def curve(
    requests: Sequence[PrefixRequest],
    kind: type[Radix] | type[Blocks],
    capacities: Sequence[int],
    **params: int,
) -> list[int]:
    """Total prompt tokens served at each capacity (tokens for Radix, blocks for Blocks), each point
    exactly what ``replay`` gives at that capacity."""
    caps = list(capacities)
    for c in caps:
        _check_cache(kind(c, **params))
    if not caps:
        return []
    with no_collection():
        order = _events(requests)
    memo = KeyMemo()  # the block keys, made once for every point
    saturated, total_top = _unbounded(requests, order, kind, params, memo)
    out: list[int] = []
    for c in caps:  # each point a replay of its own
        if c >= saturated:
            out.append(total_top)
            continue
        with no_collection():
            if kind is Radix:
                out.append(sum(radix.replay(requests, order, c, params.get("page_size", 1))[0]))
            else:
                out.append(sum(BlockReplay(c, params.get("block_size", 16), memo).run(requests, order)[0]))
    return out


def _check_cache(cache: Radix | Blocks) -> None:
    if isinstance(cache, Radix):
        if cache.capacity_tokens < 0 or cache.page_size < 1:
            raise ValueError(
                "a radix cache needs capacity_tokens >= 0 and page_size >= 1, "
                f"not {cache.capacity_tokens} and {cache.page_size}"
            )
    elif isinstance(cache, Blocks):
        if cache.num_blocks < 1 or cache.block_size < 1:
            raise ValueError(
                "a block cache needs num_blocks >= 1 (one is the null block) and block_size >= 1, "
                f"not {cache.num_blocks} and {cache.block_size}"
            )
    else:
        raise TypeError(f"the cache is a Radix or a Blocks, not {type(cache).__name__}")


def _events(requests: Sequence[PrefixRequest]) -> radix.Events:
    """Admissions and releases in time order: ``(time, phase, index, what)``, what 0 admits, 1 releases
    (``radix.Events``: the compiled radix replay reads the requests once for every replay given it)."""
    ev = radix.Events(requests)
    for i, r in enumerate(requests):
        if not r.tokens:
            raise ValueError(f"request {i} has no prompt tokens")
        if r.finish < r.arrive:
            raise ValueError(f"request {i} finishes ({r.finish}) before it arrives ({r.arrive})")
        for start, length, _h in r.extra:
            if start < 0 or length < 1 or start + length > len(r.tokens):
                raise ValueError(
                    f"request {i}: a multimodal span ({start}, {length}) lies outside its {len(r.tokens)} prompt tokens"
                )
        ev.append((r.arrive, 1, i, 0))
        ev.append((r.finish, 0, i, 1) if r.finish > r.arrive else (r.arrive, 1, i, 1))
    ev.sort()
    return ev


class BlockReplays:
    """One traffic's block cache (``Blocks``) replayed at any number of blocks, each point exactly what
    ``replay`` gives there (as ``curve`` replays its points): the block keys made once for every point, and
    every size from which nothing is evicted answered by one unbounded replay."""

    def __init__(self, requests: Sequence[PrefixRequest], block_size: int) -> None:
        _check_cache(Blocks(1, block_size))
        self.requests, self.block_size = requests, block_size
        self.order = _events(requests)
        self.memo = KeyMemo()
        one = BlockReplay(None, block_size, self.memo)
        with no_collection():
            self.top = one.run(requests, self.order)[0]
        self.saturated = one.peak  # from here up nothing is evicted (``never_evicts``)

    def served(self, num_blocks: int) -> list[int]:
        """Per request (input order), the prompt tokens served at ``num_blocks`` blocks."""
        _check_cache(Blocks(num_blocks, self.block_size))
        if num_blocks >= self.saturated:
            return list(self.top)
        with no_collection():
            return BlockReplay(num_blocks, self.block_size, self.memo).run(self.requests, self.order)[0]
