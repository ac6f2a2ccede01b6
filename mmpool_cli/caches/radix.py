"""SGLang's ``RadixCache`` (0.5.23) as its scheduler drives it, replayed: what ``prefix.Radix``
runs. The rules, and what is assumed, are in ``prefix``'s docstring. ``RadixReplay`` is the reference;
``replay`` runs its compiled twin (``kernels/_prefixreplay.c``) where it was built, the same step for
step (``tests/caches/test_prefix_native.py`` keeps them equal). Neutral: standard library only."""

from __future__ import annotations

import heapq
from collections.abc import Sequence
from types import ModuleType

from mmpool_cli.caches.prompted import PrefixRequest
from mmpool_cli.kernels.native import compiled

FAST: ModuleType | None = compiled("_prefixreplay")


class Events(list[tuple[int, int, int, int]]):
    """The admissions and releases of ``requests`` in time order (``prefix.events``), with the compiled
    replay's reading of both (``_prefixreplay.prepare``: the prompts' buffers, the events as it walks them)
    made at the first compiled replay of these requests and kept for every other: a traffic replayed at
    many capacities is read once. The requests' token buffers stay exported (not resizable) while it lives."""

    __slots__ = ("requests", "_prepared", "_sizes")

    def __init__(self, requests: Sequence[PrefixRequest]) -> None:
        super().__init__()
        self.requests = requests
        self._prepared: object | None = None
        self._sizes = (-1, -1)

    def prepared(self) -> object:
        """The compiled reading of the requests and this order, made at the first call (and again should either
        list have grown); TypeError or OverflowError where a token is not an int within int64."""
        assert FAST is not None
        sizes = (len(self.requests), len(self))
        if self._prepared is None or self._sizes != sizes:
            self._prepared = FAST.prepare(self.requests, self)
            self._sizes = sizes
        return self._prepared

    def __reduce__(self) -> tuple[type, tuple[list[tuple[int, int, int, int]]]]:
        return list, (list(self),)  # a plain list: the compiled reading holds buffers, made again where used


def replay(
    requests: Sequence[PrefixRequest], order: list[tuple[int, int, int, int]], capacity: int | None, page: int
) -> tuple[list[int], bool, int, int]:
    """``(served, evicted, over, peak)`` of the replay at ``capacity`` (None: a pool that never fills,
    whose ``peak`` is the most slots ever taken), compiled where it was built (reading the requests once
    for every replay where ``order`` is their ``Events``)."""
    if FAST is not None:
        cap = -1 if capacity is None else capacity
        try:
            got: tuple[list[int], bool, int, int] = (
                FAST.replay(order.prepared(), cap, page)
                if isinstance(order, Events) and order.requests is requests
                else FAST.radix(requests, order, cap, page)
            )
            return got
        except (TypeError, OverflowError):  # tokens (or a capacity) beyond int64: the reference runs them
            pass
    one = RadixReplay(capacity, page)
    served, evicted, over = one.run(requests, order)
    return served, evicted, over, one.peak


class Node:
    __slots__ = ("children", "parent", "key", "lock", "time")

    def __lt__(self, other: Node) -> bool:  # never decides: no two live entries share a time
        return id(self) < id(other)

    def __init__(self, time: int) -> None:
        self.children: dict[object, Node] = {}
        self.parent: Node | None = None
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


class RadixReplay:
    def __init__(self, capacity: int | None, page: int) -> None:
        # the paged allocator holds whole pages: size // page_size of them
        self.cap = None if capacity is None else capacity - capacity % page
        self.page = page
        self.clock = 0
        self.root = Node(self._tick())
        self.root.lock = 1
        self.leaves: set[Node] = set()  # the evictable leaves: unlocked, childless
        # the evictable leaves by access time, kept across evictions (SGLang heapifies them at each
        # one: the same order, without the cost); an entry is stale once its node's time moved or
        # it stopped being an evictable leaf
        self.heap: list[tuple[int, Node]] = []
        self.used = 0  # slots taken: the tree's and the running requests' own
        self.peak = 0
        self.evicted = False
        self.over = 0

    def _tick(self) -> int:
        self.clock += 1
        return self.clock

    def _ck(self, seq: Sequence[int], pos: int) -> object:
        return seq[pos] if self.page == 1 else tuple(seq[pos : pos + self.page])

    def _leaf_status(self, node: Node) -> None:
        if node.lock > 0 or node.children:
            self.leaves.discard(node)
        elif node not in self.leaves:
            self.leaves.add(node)
            heapq.heappush(self.heap, (node.time, node))

    def _touch(self, node: Node, t: int) -> None:
        node.time = t
        if node in self.leaves:
            heapq.heappush(self.heap, (t, node))

    def _split(self, child: Node, m: int) -> Node:
        new = Node(self._tick())
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

    def _match(self, seq: tuple[int, ...], n: int) -> tuple[int, Node]:
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

    def _insert(self, seq: tuple[int, ...], n: int) -> tuple[int, Node]:
        n -= n % self.page
        t = self._tick()
        self.root.time = t
        if n <= 0:
            return 0, self.root
        return self._extend(self.root, 0, seq, n, t)

    def _extend(self, node: Node, pos: int, seq: tuple[int, ...], n: int, t: int) -> tuple[int, Node]:
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
            leaf = Node(self._tick())
            leaf.parent = node
            leaf.key = seq[pos:n]
            node.children[self._ck(leaf.key, 0)] = leaf
            self._leaf_status(node)
            self._leaf_status(leaf)
            node = leaf
        return prefix, node

    def _rematch(self, end: Node, n: int) -> None:
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

    def _lock(self, node: Node) -> None:
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

    def _relock(self, lower: Node, upper: Node, delta: int) -> None:
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

    def run(
        self, requests: Sequence[PrefixRequest], order: list[tuple[int, int, int, int]]
    ) -> tuple[list[int], bool, int]:
        # Each of SGLang's calls is followed, but where a walk from the root only gives nodes a time
        # that a later walk gives them again, it is left out: the insert after a match goes on from
        # the matched node, and the match of the key just inserted is a walk up from its end.
        page = self.page
        served = [0] * len(requests)
        state: dict[int, tuple[Node, int]] = {}  # request -> (its locked node, the tree's length of it)
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
        return served, self.evicted, self.over
