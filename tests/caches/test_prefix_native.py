"""The compiled radix replay (``kernels/_prefixreplay.c``) against the Python one (``caches/radix.py``'s
``RadixReplay``, the reference): request by request, with what each says of evictions, overruns and
the peak, on random traffic and on the engines' fixtures."""

from __future__ import annotations

import heapq
import pickle
import random
from array import array
from types import ModuleType

import pytest

from mmpool_cli.caches import radix
from mmpool_cli.caches.prefix import PrefixRequest, Radix, _events, never_evicts, replay
from mmpool_cli.kernels import native

from .test_prefix import random_chats
from .test_prefix_engines import fixtures, requests

FAST = native.compiled("_prefixreplay")
pytestmark = pytest.mark.skipif(FAST is None, reason="the compiled prefix replay is not built")


def both(reqs: list[PrefixRequest], cap: int | None, page: int, prepared: object | None = None) -> None:
    """The compiled replay, read afresh and from a reading made once (``prepared``, else made here), is the
    Python one at ``cap``."""
    order = _events(reqs)
    one = radix.RadixReplay(cap, page)
    want = (*one.run(reqs, order), one.peak)
    assert FAST is not None
    got = FAST.radix(reqs, order, -1 if cap is None else cap, page)
    assert got == want, (cap, page)
    again = FAST.replay(
        prepared if prepared is not None else FAST.prepare(reqs, order), -1 if cap is None else cap, page
    )
    assert again == want, (cap, page)


def pressured(reqs: list[PrefixRequest], page: int) -> list[int]:
    top = never_evicts(reqs, Radix, page_size=page)
    return sorted({0, 1, page, top // 16, top // 8, top // 4, top // 3, top // 2, 2 * top // 3, top - 1, top})


@pytest.mark.parametrize("seed", range(12))
@pytest.mark.parametrize("page", [1, 16])
def test_the_compiled_replay_is_the_pythons_on_random_chats(seed: int, page: int) -> None:
    reqs = random_chats(seed, 300)
    assert FAST is not None
    prepared = FAST.prepare(reqs, _events(reqs))  # one reading for every capacity, as the Events keep it
    both(reqs, None, page, prepared)
    for cap in pressured(reqs, page):
        both(reqs, cap, page, prepared)


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


def deep(seed: int, n: int) -> list[PrefixRequest]:
    """Prompts over two tokens (or runs of 16 of them) sharing prefixes of every length (a deep tree, split at
    every depth), many
    admitted at the same time and released at once: evicting a leaf leaves its parent childless with an
    older time than the last pushed, so the eviction order takes many pushes behind the newest."""
    rng = random.Random(seed)
    out: list[PrefixRequest] = []
    for k in range(n):
        unit = rng.choice([1, 16])  # runs of 16: pages of 16 agree as often as single tokens do
        toks = tuple(s for _ in range(rng.randrange(1, 300 // unit)) for s in [rng.randrange(1, 3)] * unit)
        reply = tuple(rng.randrange(1, 3) for _ in range(rng.randrange(0, 6)))
        arrive = k // 8 * 8 if rng.random() < 0.5 else k  # runs of equal times
        out.append(PrefixRequest(toks, reply, (), arrive, arrive + rng.choice([0, 0, 1, 5, 30])))
    return out


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("page", [1, 2, 16])
def test_the_compiled_replay_is_the_pythons_on_deep_trees_with_pushes_out_of_order(
    seed: int, page: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    reqs = deep(seed, 400)
    pushed: list[int] = []
    push = heapq.heappush

    def record(heap: list[tuple[int, radix.Node]], entry: tuple[int, radix.Node]) -> None:
        pushed.append(entry[0])
        push(heap, entry)

    top = never_evicts(reqs, Radix, page_size=page)
    monkeypatch.setattr(heapq, "heappush", record)  # the Python replay's heap
    assert FAST is not None
    prepared = FAST.prepare(reqs, _events(reqs))
    behind = total = 0
    for cap in sorted({0, 1, page, 2 * page, 3 * page, 40, 90, 200, *(top * k // 16 for k in range(1, 17)), top - 1}):
        pushed.clear()
        both(reqs, cap, page, prepared)
        newest = 0
        for time in pushed:  # the Python replay's pushes at this capacity
            behind += time < newest
            newest = max(newest, time)
        total += len(pushed)
    assert behind > total // 50  # pushes behind the newest (the heap's part): hundreds, not a corner


def test_events_read_their_requests_once_for_every_replay(monkeypatch: pytest.MonkeyPatch) -> None:
    reqs = random_chats(5, 200)
    order = _events(reqs)
    assert isinstance(order, radix.Events)
    first = order.prepared()
    assert order.prepared() is first  # made once
    assert FAST is not None
    fresh: list[int] = []
    monkeypatch.setattr(radix, "FAST", _Counting(FAST, fresh))
    for cap in (0, 50, 400, 10_000):
        want = radix.RadixReplay(cap, 1).run(reqs, order)[0]
        assert replay(reqs, Radix(cap), order) == want  # from the reading made once
        assert replay(list(reqs), Radix(cap), order) == want  # other requests than its own: read afresh
    assert order.prepared() is first and len(fresh) == 4
    assert pickle.loads(pickle.dumps(order)) == list(order)  # pickled as the plain list
    order.append(order[-1])  # grown after its reading: read again
    assert order.prepared() is not first


class _Counting:
    """The compiled module, counting its replays that read their requests afresh."""

    def __init__(self, fast: ModuleType, fresh: list[int]) -> None:
        self.fast, self.fresh = fast, fresh

    def radix(self, *args: object) -> object:
        self.fresh.append(1)
        return self.fast.radix(*args)

    def __getattr__(self, name: str) -> object:
        return getattr(self.fast, name)


def test_events_with_tokens_beyond_int64_replay_in_python() -> None:
    big = 1 << 70
    reqs = [PrefixRequest((big, 1, 2), arrive=0, finish=1), PrefixRequest((big, 1, 3), arrive=2, finish=3)]
    order = _events(reqs)
    assert replay(reqs, Radix(100), order) == [0, 2]
    assert isinstance(order, radix.Events)
    with pytest.raises(OverflowError):
        order.prepared()


def test_a_prepared_reading_holds_its_prompts() -> None:
    reqs = [PrefixRequest(array("q", r.tokens), (), r.extra, r.arrive, r.finish) for r in random_chats(4, 150)]
    order = _events(reqs)
    want = replay(reqs, Radix(300))
    assert FAST is not None
    prepared = FAST.prepare(reqs, order)
    with pytest.raises(BufferError):  # read in place: held, not resizable
        reqs[0].tokens.append(1)  # type: ignore[attr-defined]
    del reqs  # the prompts live on in the reading
    assert FAST.replay(prepared, 300, 1)[0] == want
