"""vLLM v1's prefix caching (0.34.0: ``KVCacheManager``, ``BlockPool``, the chained block hashes)
as its scheduler drives it, replayed: what ``prefix.Blocks`` runs. The rules, and what is assumed,
are in ``prefix``'s docstring. Neutral: standard library only."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence

from mmpool_cli.caches.prompted import PrefixRequest


class KeyMemo:
    """Each request's block keys, made once for every replay of one curve: a key depends on the
    tokens and the images alone, never on the pool's size, and one table numbers them all alike."""

    def __init__(self) -> None:
        self.table: dict[tuple[int, tuple[int, ...], tuple[tuple[str, int], ...] | None], int] = {}
        self.prompt: dict[int, list[int]] = {}  # request -> its prompt's full blocks' keys
        self.whole: dict[int, list[int]] = {}  # request -> with its decoded tokens' full blocks too


class BlockReplay:
    """The block pool: its free queue is the blocks freed to its head (``head``), the blocks never
    lent yet (ids ``fresh`` to ``limit``, in order, as the pool is built), then those freed to its
    tail (``tail``); a pop takes from the first part that has one."""

    def __init__(self, num_blocks: int | None, block_size: int, memo: KeyMemo | None = None) -> None:
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
        self.memo = KeyMemo() if memo is None else memo
        self.keys = self.memo.table
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
        served = self.run(requests, order)[0]
        return self.peak, sum(served)

    def run(
        self, requests: Sequence[PrefixRequest], order: list[tuple[int, int, int, int]]
    ) -> tuple[list[int], bool, int]:
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
                known = self.memo.prompt.get(i)
                if known is None:
                    keys = self._block_keys(tokens, r.extra, [], plen // bs)
                    self.memo.prompt[i] = keys[:]
                else:
                    keys = known[:]  # extended at release: a copy
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
                        whole = self.memo.whole.get(i)
                        if whole is None:
                            self._block_keys(tokens + tuple(r.output[:decode]), r.extra, keys, n_full)
                            self.memo.whole[i] = keys[:]
                        else:
                            keys[len(keys) :] = whole[len(keys) :]
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
        return served, self.evicted, self.over

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
