"""The compiled radix replay (``kernels/_prefixreplay.c``) against the Python one (``caches/radix.py``'s
``RadixReplay``, the reference): request by request, with what each says of evictions, overruns and
the peak, on random traffic and on the engines' fixtures."""

from __future__ import annotations

import random
from array import array

import pytest

from mmpool_cli.caches import radix
from mmpool_cli.caches.prefix import PrefixRequest, Radix, _events, never_evicts, replay
from mmpool_cli.kernels import native

from .test_prefix import random_chats
from .test_prefix_engines import fixtures, requests

FAST = native.compiled("_prefixreplay")
pytestmark = pytest.mark.skipif(FAST is None, reason="the compiled prefix replay is not built")


def both(reqs: list[PrefixRequest], cap: int | None, page: int) -> None:
    order = _events(reqs)
    one = radix.RadixReplay(cap, page)
    want = (*one.run(reqs, order), one.peak)
    assert FAST is not None
    got = FAST.radix(reqs, order, -1 if cap is None else cap, page)
    assert got == want, (cap, page)


def pressured(reqs: list[PrefixRequest], page: int) -> list[int]:
    top = never_evicts(reqs, Radix, page_size=page)
    return sorted({0, 1, page, top // 16, top // 8, top // 4, top // 3, top // 2, 2 * top // 3, top - 1, top})


@pytest.mark.parametrize("seed", range(12))
@pytest.mark.parametrize("page", [1, 16])
def test_the_compiled_replay_is_the_pythons_on_random_chats(seed: int, page: int) -> None:
    reqs = random_chats(seed, 300)
    both(reqs, None, page)
    for cap in pressured(reqs, page):
        both(reqs, cap, page)


def long_lived(seed: int, n: int) -> list[PrefixRequest]:
    """Many requests alive at once (concurrency from arrive/finish), long outputs, few distinct words:
    splits at every depth and evictions of leaves that other requests re-grow."""
    rng = random.Random(seed)
    out: list[PrefixRequest] = []
    for _ in range(n):
        base = rng.choice([(), (1, 2, 3), (1, 2, 3, 4, 5, 6, 7, 8)])
        toks = base + tuple(rng.randrange(1, 5) for _ in range(rng.randrange(1, 60)))
        reply = tuple(rng.randrange(1, 5) for _ in range(rng.randrange(0, 40)))
        arrive = rng.randrange(0, 4 * n)
        out.append(PrefixRequest(toks, reply, (), arrive, arrive + rng.randrange(0, 300)))
    return out


@pytest.mark.parametrize("seed", range(8))
@pytest.mark.parametrize("page", [1, 2, 16])
def test_the_compiled_replay_is_the_pythons_under_concurrency(seed: int, page: int) -> None:
    reqs = long_lived(seed, 250)
    for cap in pressured(reqs, page):
        both(reqs, cap, page)


def test_the_compiled_replay_is_the_pythons_on_the_engines_fixtures() -> None:
    points = 0
    for s in fixtures()["scenarios"]:
        reqs = requests(s, "sglang")
        for p in s["sglang"]:
            both(reqs, p["capacity_tokens"], p["page_size"])
            assert replay(reqs, Radix(p["capacity_tokens"], p["page_size"])) == p["served"]
            points += 1
    assert points > 20


def test_tokens_as_arrays_lists_or_tuples_replay_alike() -> None:
    # prompts read in place (int64 arrays, at most one output token: none inserted) beside copied ones
    reqs = [
        PrefixRequest(r.tokens, r.output[: n % 3], r.extra, r.arrive, r.finish)
        for n, r in enumerate(random_chats(3, 200))
    ]
    as_arrays = [PrefixRequest(array("q", r.tokens), list(r.output), r.extra, r.arrive, r.finish) for r in reqs]
    other = [PrefixRequest(array("i", r.tokens), r.output, r.extra, r.arrive, r.finish) for r in reqs]  # 4 bytes
    for cap in (50, 400, 10_000):
        for page in (1, 16):
            want = replay(reqs, Radix(cap, page))
            assert replay(as_arrays, Radix(cap, page)) == want
            assert replay(other, Radix(cap, page)) == want
            both(as_arrays, cap, page)


def test_tokens_beyond_int64_run_in_python() -> None:
    big = 1 << 70
    reqs = [PrefixRequest((big, 1, 2), arrive=0, finish=1), PrefixRequest((big, 1, 3), arrive=2, finish=3)]
    assert replay(reqs, Radix(100)) == [0, 2]
    assert FAST is not None
    with pytest.raises(OverflowError):
        FAST.radix(reqs, _events(reqs), 100, 1)


@pytest.mark.parametrize("page", [1, 16])
def test_the_compiled_replay_is_the_pythons_after_the_heap_drops_its_stale_entries(
    page: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    rebuilt = []
    heapify = radix.heapq.heapify
    monkeypatch.setattr(radix.heapq, "heapify", lambda h: (rebuilt.append(len(h)), heapify(h))[1])
    reqs = random_chats(1, 6000)
    both(reqs, never_evicts(reqs, Radix, page_size=page) // 3, page)
    assert rebuilt  # the Python replay rebuilt its heap: the compiled one had to drop the same entries
