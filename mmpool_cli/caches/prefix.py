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

import gc
import heapq
from collections import OrderedDict
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass


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


def replay(requests: Sequence[PrefixRequest], cache: Radix | Blocks) -> list[int]:
    """Per request (input order), the prompt tokens served from the cache at its admission."""
    return run(requests, cache).served


def run(requests: Sequence[PrefixRequest], cache: Radix | Blocks) -> Replay:
    """The replay of ``requests`` through ``cache``, with whether it evicted or ran over."""
    _check_cache(cache)
    order = _events(requests)
    with _no_collection():
        if isinstance(cache, Radix):
            return _RadixReplay(cache.capacity_tokens, cache.page_size).run(requests, order)
        return _BlockReplay(cache.num_blocks, cache.block_size).run(requests, order)


@contextmanager
def _no_collection() -> Iterator[None]:
    """A replay makes millions of small objects (nodes, keys) and no reference cycle that outlives
    it; the cyclic collector's passes over them cost a fifth to a third of its time, and find nothing."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def never_evicts(requests: Sequence[PrefixRequest], kind: type[Radix] | type[Blocks], **params: int) -> int:
    """The smallest capacity (tokens for Radix, blocks for Blocks) at which the replay of
    ``requests`` evicts nothing; every capacity from it up serves what the unbounded cache serves."""
    return _unbounded(requests, _events(requests), kind, params)[0]


def _unbounded(
    requests: Sequence[PrefixRequest],
    order: list[tuple[int, int, int, int]],
    kind: type[Radix] | type[Blocks],
    params: dict[str, int],
) -> tuple[int, int]:
    """``(never_evicts, tokens served)`` of the replay in a cache that never fills."""
    _check_cache(kind(1, **params))
    one = (
        _RadixReplay(None, params.get("page_size", 1))
        if kind is Radix
        else _BlockReplay(None, params.get("block_size", 16))
    )
    with _no_collection():
        return one.peak_after(requests, order)


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
    order = _events(requests)
    saturated, total_top = _unbounded(requests, order, kind, params)
    out: list[int] = []
    for c in caps:  # each point a replay of its own
        if c >= saturated:
            out.append(total_top)
            continue
        one: _RadixReplay | _BlockReplay
        if kind is Radix:
            one = _RadixReplay(c, params.get("page_size", 1))
        else:
            one = _BlockReplay(c, params.get("block_size", 16))
        with _no_collection():
            out.append(sum(one.run(requests, order).served))
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


def _events(requests: Sequence[PrefixRequest]) -> list[tuple[int, int, int, int]]:
    """Admissions and releases in time order: ``(time, phase, index, what)``, what 0 admits, 1 releases."""
    ev: list[tuple[int, int, int, int]] = []
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


# --- the radix tree ------------------------------------------------------------------------------


class _Node:
    __slots__ = ("children", "parent", "key", "lock", "time")

    def __lt__(self, other: _Node) -> bool:  # never decides: no two live entries share a time
        return id(self) < id(other)

    def __init__(self, time: int) -> None:
        self.children: dict[object, _Node] = {}
        self.parent: _Node | None = None
        self.key: tuple[int, ...] = ()
        self.lock = 0
        self.time = time


def _common(a: tuple[int, ...], b: tuple[int, ...], off: int, n: int) -> int:
    """Length of the common prefix of ``a[:n]`` and ``b[off:off + n]``."""
    if a[:n] == b[off : off + n]:
        return n
    lo, hi = 0, n  # a[:lo] matches, a[:hi] does not
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if a[lo:mid] == b[off + lo : off + mid]:
            lo = mid
        else:
            hi = mid
    return lo


class _RadixReplay:
    def __init__(self, capacity: int | None, page: int) -> None:
        # the paged allocator holds whole pages: size // page_size of them
        self.cap = None if capacity is None else capacity - capacity % page
        self.page = page
        self.clock = 0
        self.root = _Node(self._tick())
        self.root.lock = 1
        self.leaves: set[_Node] = set()  # the evictable leaves: unlocked, childless
        # the evictable leaves by access time, kept across evictions (SGLang heapifies them at each
        # one: the same order, without the cost); an entry is stale once its node's time moved or
        # it stopped being an evictable leaf
        self.heap: list[tuple[int, _Node]] = []
        self.used = 0  # slots taken: the tree's and the running requests' own
        self.peak = 0
        self.evicted = False
        self.over = 0

    def _tick(self) -> int:
        self.clock += 1
        return self.clock

    def _ck(self, seq: Sequence[int], pos: int) -> object:
        return seq[pos] if self.page == 1 else tuple(seq[pos : pos + self.page])

    def _leaf_status(self, node: _Node) -> None:
        if node.lock > 0 or node.children:
            self.leaves.discard(node)
        elif node not in self.leaves:
            self.leaves.add(node)
            heapq.heappush(self.heap, (node.time, node))

    def _touch(self, node: _Node, t: int) -> None:
        node.time = t
        if node in self.leaves:
            heapq.heappush(self.heap, (t, node))

    def _split(self, child: _Node, m: int) -> _Node:
        new = _Node(self._tick())
        parent = child.parent
        assert parent is not None
        new.parent = parent
        new.lock = child.lock
        new.key = child.key[:m]
        child.key = child.key[m:]
        new.children = {self._ck(child.key, 0): child}
        child.parent = new
        parent.children[self._ck(new.key, 0)] = new
        return new

    def _match(self, seq: tuple[int, ...], n: int) -> tuple[int, _Node]:
        n -= n % self.page
        if n <= 0:
            return 0, self.root
        t = self._tick()
        node = self.root
        node.time = t
        pos = 0
        page = self.page
        while pos < n:
            child = node.children.get(seq[pos] if page == 1 else seq[pos : pos + page])
            if child is None:
                break
            self._touch(child, t)
            klen = len(child.key)
            m = _common(child.key, seq, pos, min(klen, n - pos))
            m -= m % page
            if m < klen:
                node = self._split(child, m)
                pos += m
                break
            pos += klen
            node = child
        return pos, node

    def _insert(self, seq: tuple[int, ...], n: int) -> tuple[int, _Node]:
        n -= n % self.page
        t = self._tick()
        self.root.time = t
        if n <= 0:
            return 0, self.root
        return self._extend(self.root, 0, seq, n, t)

    def _extend(self, node: _Node, pos: int, seq: tuple[int, ...], n: int, t: int) -> tuple[int, _Node]:
        """SGLang's insert from ``node``, which holds ``seq[:pos]``: the walk on, splits, a new leaf."""
        page = self.page
        while pos < n:
            child = node.children.get(seq[pos] if page == 1 else seq[pos : pos + page])
            if child is None:
                break
            node = child
            self._touch(node, t)
            klen = len(node.key)
            m = _common(node.key, seq, pos, min(klen, n - pos))
            m -= m % page
            pos += m
            if m < klen:
                node = self._split(node, m)
        prefix = pos
        if pos < n:
            leaf = _Node(self._tick())
            leaf.parent = node
            leaf.key = seq[pos:n]
            node.children[self._ck(leaf.key, 0)] = leaf
            self._leaf_status(node)
            self._leaf_status(leaf)
            node = leaf
        return prefix, node

    def _rematch(self, end: _Node, n: int) -> None:
        """SGLang's match of a key just inserted: it ends at ``end`` (the insert split there), so it
        only gives every node up to the root one new access time."""
        if n <= 0:
            return
        t = self._tick()
        root = self.root
        self._touch(end, t)  # the only node of the path that can be a leaf
        x = end.parent
        while x is not None:
            x.time = t
            x = x.parent
        root.time = t

    def _lock(self, node: _Node) -> None:
        self._relock(node, self.root, 1)

    def _evict(self, num: int) -> None:
        heap = self.heap
        leaves = self.leaves
        done = 0
        while done < num and heap:
            t, x = heapq.heappop(heap)
            if x.time != t or x not in leaves:
                continue
            done += len(x.key)
            parent = x.parent
            assert parent is not None
            del parent.children[self._ck(x.key, 0)]
            leaves.discard(x)
            self._leaf_status(parent)  # a parent left childless and unlocked is a candidate now
        if done:
            self.evicted = True
        self.used -= done
        if len(heap) > 4 * len(leaves) + 4096:  # drop the stale entries
            self.heap = [(x.time, x) for x in leaves]
            heapq.heapify(self.heap)

    def _make_room(self, demand: int) -> None:
        """Evict the shortfall of ``demand`` slots (``evict_to_free_tokens``)."""
        if self.cap is None:
            # a pool of at least this many slots never evicts: the curve's points above it are one replay
            self.peak = max(self.peak, self.used + demand)
            return
        short = demand - (self.cap - self.used)
        if short > 0:
            self._evict(short)

    def _take(self, n: int) -> None:
        self.used += n
        if self.used > self.peak:
            self.peak = self.used
        if self.cap is not None and self.used > self.cap:
            self.over += 1

    def peak_after(self, requests: Sequence[PrefixRequest], order: list[tuple[int, int, int, int]]) -> tuple[int, int]:
        served = self.run(requests, order).served
        return -(-self.peak // self.page) * self.page, sum(served)  # the pool holds whole pages

    def _relock(self, lower: _Node, upper: _Node, delta: int) -> None:
        """Add ``delta`` to the locks of the nodes from ``lower`` up to, not including, ``upper``
        (an ancestor of ``lower``, or the root): an unlock of one and a lock of the other."""
        # only the lowest node can be childless: the others' status (not a leaf) cannot change
        first = lower
        while lower is not upper:
            lower.lock += delta
            assert lower.parent is not None
            lower = lower.parent
        if first is not upper:
            self._leaf_status(first)

    def run(self, requests: Sequence[PrefixRequest], order: list[tuple[int, int, int, int]]) -> Replay:
        # Each of SGLang's calls is followed, but where a walk from the root only gives nodes a time
        # that a later walk gives them again, it is left out: the insert after a match goes on from
        # the matched node, and the match of the key just inserted is a walk up from its end.
        page = self.page
        served = [0] * len(requests)
        state: dict[int, tuple[_Node, int]] = {}  # request -> (its locked node, the tree's length of it)
        root = self.root
        for _t, _p, i, what in order:
            r = requests[i]
            seq = r.tokens if type(r.tokens) is tuple else tuple(r.tokens)
            plen = len(seq)
            if what == 0:
                prefix, last = self._match(seq, plen - 1)
                served[i] = prefix
                self._lock(last)
                # pages of the prompt beyond the matched prefix (the prefix is page-aligned)
                pages = -(-plen // page) - prefix // page
                self._make_room((plen - prefix) + (page if page > 1 else 0))
                self._take(pages * page)
                n = plen - plen % page
                # checkpoint at prefill: insert (from `last`: the root's path to it is the match's),
                # free the duplicates, match again, move the lock down to the end
                t = self._tick()
                root.time = t
                ins, end = self._extend(last, prefix, seq, n, t) if n > 0 else (0, root)
                if ins > prefix:
                    self.used -= ins - prefix
                self._rematch(end, n)
                self._relock(end, last, 1)
                state[i] = (end, n)
            else:
                node, owned_tree = state.pop(i)
                decode = max(len(r.output) - 1, 0)
                full = seq
                if decode:
                    full = seq + tuple(r.output[:decode])
                    if page == 1:
                        self._make_room(decode)
                        self._take(decode)
                    else:
                        for step in range(decode):
                            self._make_room(page)
                            if (plen + step) % page == 0:
                                self._take(page)
                total = plen + decode
                n = total - total % page
                # release: insert the prompt and output (from the request's node), the prompt again
                # (its boundary is the request's node: only times, which the match then sets), free
                # the duplicates, match, free the partial page, drop the lock
                t = self._tick()
                root.time = t
                ins, end = self._extend(node, owned_tree, full, n, t) if n > 0 else (0, root)
                pn = plen - plen % page
                if 0 < pn < n:
                    self._tick()
                if ins > owned_tree:
                    self.used -= ins - owned_tree
                self._rematch(end, n)
                held_pages = -(-total // page)
                self.used -= held_pages * page - n
                self._relock(end, node, 0)
                self._relock(node, root, -1)
        return Replay(served, self.evicted, self.over)


# --- the block pool ------------------------------------------------------------------------------


class _BlockReplay:
    """The block pool: its free queue is the blocks freed to its head (``head``), the blocks never
    lent yet (ids ``fresh`` to ``limit``, in order, as the pool is built), then those freed to its
    tail (``tail``); a pop takes from the first part that has one."""

    def __init__(self, num_blocks: int | None, block_size: int) -> None:
        self.bs = block_size
        self.limit = None if num_blocks is None else num_blocks - 1  # the null block is never lent
        self.head: OrderedDict[int, None] = OrderedDict()
        self.tail: OrderedDict[int, None] = OrderedDict()
        self.fresh = 1
        self.extra_id = -1  # blocks lent beyond the pool, when running requests need more than it has
        self.lent = 0
        self.ref: dict[int, int] = {}
        self.key_of: dict[int, int] = {}  # block -> its key, while cached
        self.primary: dict[int, int] = {}  # key -> the block a lookup finds
        self.dups: dict[int, dict[int, None]] = {}  # key -> every block cached under it, where several
        self.keys: dict[tuple[int, tuple[int, ...], tuple[tuple[str, int], ...] | None], int] = {}
        self.peak = 1  # the pool size from which this replay's pops never reach a freed cached block
        self.evicted = False
        self.over = 0

    def _block_keys(
        self, tokens: tuple[int, ...], extra: Sequence[tuple[int, int, str]], keys: list[int], n: int
    ) -> list[int]:
        """``keys`` extended to the first ``n`` full blocks, each key chained on its parent's."""
        bs = self.bs
        table = self.keys
        get = table.get
        parent = keys[-1] if keys else -1
        append = keys.append
        start = len(keys) * bs
        if not extra:
            for lo in range(start, n * bs, bs):
                k = (parent, tokens[lo : lo + bs], None)
                kid = get(k)
                if kid is None:
                    kid = table[k] = len(table)
                append(kid)
                parent = kid
            return keys
        spans = sorted((s, ln, h) for s, ln, h in extra)
        for lo in range(start, n * bs, bs):
            hi = lo + bs
            found = [(h, s - lo) for s, ln, h in spans if s < hi and s + ln > lo]
            k2 = (parent, tokens[lo:hi], tuple(found) if found else None)
            kid = get(k2)
            if kid is None:
                kid = table[k2] = len(table)
            append(kid)
            parent = kid
        return keys

    def _pop_key(self, key: int, block: int) -> None:
        dups = self.dups.get(key)
        if dups is None:
            if self.primary.get(key) == block:
                del self.primary[key]
        elif dups.pop(block, False) is None:
            self.primary[key] = next(iter(dups))
            if len(dups) == 1:
                del self.dups[key]

    def _popleft(self) -> int | None:
        if self.head:
            return self.head.popitem(last=False)[0]
        if self.limit is None or self.fresh <= self.limit:
            b = self.fresh
            self.fresh += 1
            if self.fresh > self.peak:
                self.peak = self.fresh
            return b
        if self.tail:
            return self.tail.popitem(last=False)[0]
        return None

    def _uncache(self, b: int) -> None:
        key = self.key_of.pop(b, None)
        if key is not None:
            self._pop_key(key, b)
            self.evicted = True

    def _new_blocks(self, n: int) -> list[int]:
        """``popleft_n``: the head's blocks (never keyed: only unkeyed ones are freed there), the
        blocks never lent, then the tail's, each losing its key (an eviction)."""
        out: list[int] = []
        head = self.head
        while n and head:
            out.append(head.popitem(last=False)[0])
            n -= 1
        if n:
            f = self.fresh
            take = n if self.limit is None else min(n, self.limit + 1 - f)
            if take > 0:
                out.extend(range(f, f + take))
                self.fresh = f + take
                self.peak = max(self.peak, self.fresh)
                n -= take
        tail = self.tail
        while n and tail:
            b = tail.popitem(last=False)[0]
            self._uncache(b)
            out.append(b)
            n -= 1
        if n:  # beyond the pool: the engine would have made the request wait
            out.extend(range(self.extra_id, self.extra_id - n, -1))
            self.extra_id -= n
            self.over += 1
        self.ref.update(dict.fromkeys(out, 1))
        self.lent += len(out)
        return out

    def _remove(self, b: int) -> None:
        if b in self.head:
            del self.head[b]
        else:
            del self.tail[b]

    def _cache(self, blocks: list[int], keys: list[int], lo: int, hi: int) -> None:
        for j in range(lo, hi):
            b = blocks[j]
            key = keys[j]
            self.key_of[b] = key
            first = self.primary.setdefault(key, b)
            if first != b:
                self.dups.setdefault(key, {first: None})[b] = None

    def peak_after(self, requests: Sequence[PrefixRequest], order: list[tuple[int, int, int, int]]) -> tuple[int, int]:
        served = self.run(requests, order).served
        return self.peak, sum(served)

    def run(self, requests: Sequence[PrefixRequest], order: list[tuple[int, int, int, int]]) -> Replay:
        bs = self.bs
        served = [0] * len(requests)
        held: dict[int, tuple[list[int], list[int]]] = {}  # request -> (its blocks, its tokens' keys)
        ref = self.ref
        primary = self.primary
        key_of = self.key_of
        head = self.head
        tail = self.tail
        for _t, _p, i, what in order:
            r = requests[i]
            tokens = r.tokens if type(r.tokens) is tuple else tuple(r.tokens)
            plen = len(tokens)
            if what == 0:
                keys = self._block_keys(tokens, r.extra, [], plen // bs)
                hit: list[int] = []
                for key in keys[: (plen - 1) // bs]:
                    b = primary.get(key)
                    if b is None:
                        break
                    hit.append(b)
                served[i] = len(hit) * bs
                for b in hit:
                    if b in ref:
                        ref[b] += 1
                    else:  # a cached block in the free queue: out of it (touch)
                        if b in head:
                            del head[b]
                        else:
                            del tail[b]
                        self.lent += 1
                        ref[b] = 1
                blocks = hit + self._new_blocks(-(-plen // bs) - len(hit))
                self._cache(blocks, keys, len(hit), plen // bs)
                held[i] = (blocks, keys)
            else:
                blocks, keys = held.pop(i)
                decode = max(len(r.output) - 1, 0)
                if decode:
                    total = plen + decode
                    blocks += self._new_blocks(-(-total // bs) - len(blocks))
                    n_full = total // bs
                    if n_full > len(keys):
                        self._block_keys(tokens + tuple(r.output[:decode]), r.extra, keys, n_full)
                    self._cache(blocks, keys, plen // bs, n_full)
                first: list[int] = []
                last: list[int] = []
                for b in reversed(blocks):
                    c = ref[b] - 1
                    if c:
                        ref[b] = c
                    else:
                        del ref[b]
                        (last if b in key_of else first).append(b)
                self.lent -= len(first) + len(last)
                for b in reversed(first):
                    head[b] = None
                    head.move_to_end(b, last=False)
                for b in last:
                    tail[b] = None
                if self.limit is not None and self.over:
                    self._give_back_extra()
        return Replay(served, self.evicted, self.over)

    def _give_back_extra(self) -> None:
        """Blocks lent beyond the pool leave it as they are freed: the queue's first go."""
        if self.limit is None:
            return
        excess = len(self.head) + len(self.tail) + (self.limit + 1 - self.fresh) + self.lent - self.limit
        while excess > 0:
            b = self._popleft()
            if b is None:
                return
            self._uncache(b)
            excess -= 1
