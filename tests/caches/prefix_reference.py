"""The prefix replay as first written: a line-by-line transcription of the engines' code (a full
tree walk for each of SGLang's calls, the eviction heap built at each eviction as SGLang builds it).
Checked against the engines' fixtures like ``mmpool_cli.caches.prefix``, it is the oracle the faster
replay is compared with on traffic too large to record from the engines."""

from __future__ import annotations

import heapq
from collections import OrderedDict
from collections.abc import Sequence

from mmpool_cli.caches.prefix import Blocks, PrefixRequest, Radix, Replay, _events


def replay(requests: Sequence[PrefixRequest], cache: Radix | Blocks) -> list[int]:
    """What ``mmpool_cli.caches.prefix.replay`` gives, the slow way."""
    order = _events(requests)
    if isinstance(cache, Radix):
        return _RadixReplay(cache.capacity_tokens, cache.page_size).run(requests, order).served
    return _BlockReplay(cache.num_blocks, cache.block_size).run(requests, order).served


# --- the radix tree ------------------------------------------------------------------------------


class _Node:
    __slots__ = ("children", "parent", "key", "lock", "time")

    def __init__(self, time: int) -> None:
        self.children: dict[object, _Node] = {}
        self.parent: _Node | None = None
        self.key: tuple[int, ...] = ()
        self.lock = 0
        self.time = time


def _common(a: tuple[int, ...], b: Sequence[int], off: int, n: int) -> int:
    """Length of the common prefix of ``a[:n]`` and ``b[off:off + n]``."""
    if a[:n] == tuple(b[off : off + n]):
        return n
    lo, hi = 0, n  # a[:lo] matches, a[:hi] does not
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if a[lo:mid] == tuple(b[off + lo : off + mid]):
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
        self.leaves: set[_Node] = set()
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
        else:
            self.leaves.add(node)

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

    def _match(self, seq: Sequence[int], n: int) -> tuple[int, _Node]:
        n -= n % self.page
        if n <= 0:
            return 0, self.root
        t = self._tick()
        node = self.root
        node.time = t
        pos = 0
        page = self.page
        while pos < n:
            child = node.children.get(self._ck(seq, pos))
            if child is None:
                break
            child.time = t
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

    def _insert(self, seq: Sequence[int], n: int) -> tuple[int, _Node]:
        n -= n % self.page
        t = self._tick()
        node = self.root
        node.time = t
        if n <= 0:
            return 0, node
        pos = 0
        page = self.page
        while pos < n:
            child = node.children.get(self._ck(seq, pos))
            if child is None:
                break
            node = child
            node.time = t
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
            leaf.key = tuple(seq[pos:n])
            node.children[self._ck(leaf.key, 0)] = leaf
            self._leaf_status(node)
            self._leaf_status(leaf)
            node = leaf
        return prefix, node

    def _lock(self, node: _Node) -> None:
        while node is not self.root:
            node.lock += 1
            self._leaf_status(node)
            assert node.parent is not None
            node = node.parent

    def _unlock(self, node: _Node) -> None:
        while node is not self.root:
            node.lock -= 1
            self._leaf_status(node)
            assert node.parent is not None
            node = node.parent

    def _evict(self, num: int) -> None:
        heap = [(x.time, id(x), x) for x in self.leaves]
        heapq.heapify(heap)
        done = 0
        while done < num and heap:
            _t, _i, x = heapq.heappop(heap)
            done += len(x.key)
            parent = x.parent
            assert parent is not None
            del parent.children[self._ck(x.key, 0)]
            self.leaves.discard(x)
            self._leaf_status(parent)
            if not parent.children and parent.lock == 0:
                heapq.heappush(heap, (parent.time, id(parent), parent))
        if done:
            self.evicted = True
        self.used -= done

    def _make_room(self, demand: int) -> None:
        """Evict the shortfall of ``demand`` slots (``evict_to_free_tokens``)."""
        if self.cap is None:
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

    def run(self, requests: Sequence[PrefixRequest], order: list[tuple[int, int, int, int]]) -> Replay:
        page = self.page
        served = [0] * len(requests)
        state: dict[int, tuple[_Node, int]] = {}  # request -> (locked node, tree-owned length)
        for _t, _p, i, what in order:
            r = requests[i]
            seq = r.tokens
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
                ins, _ = self._insert(seq, n)
                if ins > prefix:
                    self.used -= ins - prefix
                _m, node = self._match(seq, n)
                self._unlock(last)
                self._lock(node)
                state[i] = (node, n)
            else:
                node, owned_tree = state.pop(i)
                decode = max(len(r.output) - 1, 0)
                full: Sequence[int] = seq
                if decode:
                    full = list(seq) + list(r.output[:decode])
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
                ins, _ = self._insert(full, n)
                pn = plen - plen % page
                if 0 < pn < n:
                    self._insert(full, pn)
                if ins > owned_tree:
                    self.used -= ins - owned_tree
                _m, new = self._match(full, n)
                self._unlock(node)
                self._lock(new)
                # the partial page past the tree's part goes back
                held_pages = -(-total // page)
                self.used -= held_pages * page - n
                self._unlock(new)
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
        self, tokens: Sequence[int], extra: Sequence[tuple[int, int, str]], keys: list[int], n: int
    ) -> list[int]:
        """``keys`` extended to the first ``n`` full blocks, each key chained on its parent's."""
        bs = self.bs
        spans = sorted((s, ln, h) for s, ln, h in extra)
        table = self.keys
        parent = keys[-1] if keys else -1
        for b in range(len(keys), n):
            lo = b * bs
            hi = lo + bs
            ex: tuple[tuple[str, int], ...] | None = None
            if spans:
                found = [(h, s - lo) for s, ln, h in spans if s < hi and s + ln > lo]
                ex = tuple(found) if found else None
            k = (parent, tuple(tokens[lo:hi]), ex)
            kid = table.get(k)
            if kid is None:
                kid = len(table)
                table[k] = kid
            keys.append(kid)
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
        out = []
        over = False
        for _ in range(n):
            b = self._popleft()
            if b is None:
                b = self.extra_id
                self.extra_id -= 1
                over = True
            else:
                self._uncache(b)
            self.ref[b] = 1
            out.append(b)
        self.lent += n
        if over:
            self.over += 1
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

    def run(self, requests: Sequence[PrefixRequest], order: list[tuple[int, int, int, int]]) -> Replay:
        bs = self.bs
        served = [0] * len(requests)
        held: dict[int, tuple[list[int], list[int]]] = {}  # request -> (its blocks, its tokens' keys)
        for _t, _p, i, what in order:
            r = requests[i]
            plen = len(r.tokens)
            if what == 0:
                keys = self._block_keys(r.tokens, r.extra, [], plen // bs)
                hit: list[int] = []
                primary = self.primary
                for key in keys[: (plen - 1) // bs]:
                    b = primary.get(key)
                    if b is None:
                        break
                    hit.append(b)
                served[i] = len(hit) * bs
                for b in hit:
                    if b in self.ref:
                        self.ref[b] += 1
                    else:
                        self._remove(b)
                        self.lent += 1
                        self.ref[b] = 1
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
                        full = list(r.tokens) + list(r.output[:decode])
                        self._block_keys(full, r.extra, keys, n_full)
                    self._cache(blocks, keys, plen // bs, n_full)
                first: list[int] = []
                last: list[int] = []
                ref = self.ref
                for b in reversed(blocks):
                    ref[b] -= 1
                    if ref[b] == 0:
                        del ref[b]
                        (last if b in self.key_of else first).append(b)
                self.lent -= len(first) + len(last)
                head = self.head
                for b in reversed(first):
                    head[b] = None
                    head.move_to_end(b, last=False)
                tail = self.tail
                for b in last:
                    tail[b] = None
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
