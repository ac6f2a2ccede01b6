"""The split's helpers: the batch that fits a KV size, against the plain count it replaces."""

from __future__ import annotations

import random

from mmpool_cli.tune.split import Batches


def _fits(request_tokens: list[int], kv: int) -> int:
    """The shortest requests first, as many as their sum allows: counted one by one."""
    n = used = 0
    for t in sorted(request_tokens):
        if used + t > kv:
            break
        used += t
        n += 1
    return n


def test_batches_equal_the_count_one_by_one_at_every_size() -> None:
    rng = random.Random(43)
    for _ in range(200):
        tokens = [rng.choice([0, 1, 16, rng.randrange(1, 5000)]) for _ in range(rng.randrange(0, 40))]
        fit = Batches(tokens)
        total = sum(tokens)
        for kv in {0, 1, total, total + 1, *(rng.randrange(0, total + 2) for _ in range(20))}:
            assert fit.at(kv) == _fits(tokens, kv), (tokens, kv)


def test_no_request_fits_a_size_below_the_shortest() -> None:
    assert Batches([5, 7]).at(4) == 0
    assert Batches([]).at(10**9) == 0
