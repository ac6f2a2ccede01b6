"""The prefix cache's replay on cases small enough to follow by hand; the engines' own classes are
checked against it in test_prefix_engines.py."""

from __future__ import annotations

import random

import pytest

from mmpool_cli.caches.prefix import BlockReplays, Blocks, PrefixRequest, Radix, curve, never_evicts, replay, run

from . import prefix_reference


def chat(turns: int, *, gap: int = 10) -> list[PrefixRequest]:
    """One conversation: each turn's prompt is the previous prompt, its reply and new words."""
    out: list[PrefixRequest] = []
    prompt: tuple[int, ...] = tuple(range(1, 41))
    for k in range(turns):
        reply = tuple(1000 * (k + 1) + j for j in range(8))
        out.append(PrefixRequest(prompt, reply, arrive=k * gap, finish=k * gap + 5))
        prompt = prompt + reply + tuple(500 + 10 * k + j for j in range(6))
    return out


def test_a_radix_tree_serves_each_turn_the_previous_prompt_and_reply_less_its_last_token() -> None:
    reqs = chat(3)
    # turn 2's prompt starts with turn 1's prompt and reply; the reply's last token had no KV
    assert replay(reqs, Radix(10_000)) == [0, 40 + 7, 54 + 7]


def test_blocks_serve_whole_blocks_within_all_but_the_last_prompt_token() -> None:
    same = tuple(range(32))
    reqs = [PrefixRequest(same, arrive=0, finish=1), PrefixRequest(same, arrive=2, finish=3)]
    # 32 tokens are two full blocks, but the last token is recomputed: one block served
    assert replay(reqs, Blocks(100, 16)) == [0, 16]
    assert replay(reqs, Radix(100)) == [0, 31]


def test_blocks_keyed_by_their_items_do_not_match_other_items_behind_the_same_tokens() -> None:
    toks = tuple([7] * 40)
    a = PrefixRequest(toks, extra=((0, 40, "img-a"),), arrive=0, finish=1)
    b = PrefixRequest(toks, extra=((0, 40, "img-b"),), arrive=2, finish=3)
    c = PrefixRequest(toks, extra=((0, 40, "img-a"),), arrive=4, finish=5)
    assert replay([a, b, c], Blocks(100, 16)) == [0, 0, 32]


def test_a_running_request_keeps_its_prefix_from_eviction() -> None:
    sys_prompt = tuple(range(1, 21))
    long = PrefixRequest(sys_prompt + tuple(range(100, 120)), arrive=0, finish=100)
    other = PrefixRequest(tuple(range(200, 230)), arrive=1, finish=2)
    again = PrefixRequest(sys_prompt + (9, 9), arrive=3, finish=4)
    # 40 + 30 + 2 slots exceed 60: the other request's leaf goes, the running one's path stays
    assert replay([long, other, again], Radix(60)) == [0, 0, 20]


def test_the_least_recently_used_leaf_goes_first() -> None:
    a = PrefixRequest(tuple(range(1, 21)), arrive=0, finish=1)
    b = PrefixRequest(tuple(range(101, 121)), arrive=2, finish=3)
    a2 = PrefixRequest(tuple(range(1, 21)) + (5,), arrive=4, finish=5)  # touches a's path
    c = PrefixRequest(tuple(range(201, 221)), arrive=6, finish=7)  # needs 20 slots: b goes, not a
    a3 = PrefixRequest(tuple(range(1, 21)) + (6,), arrive=8, finish=9)
    b2 = PrefixRequest(tuple(range(101, 121)) + (5,), arrive=10, finish=11)
    assert replay([a, b, a2, c, a3, b2], Radix(60)) == [0, 0, 20, 0, 20, 0]


def test_each_curve_point_is_one_replay() -> None:
    reqs = chat(6, gap=3) + [PrefixRequest(tuple(range(1, 41)) + (77,) * 20, arrive=4, finish=30)]
    for kind, caps, params in (
        (Radix, [0, 30, 60, 90, 150, 400, 10_000], {"page_size": 1}),
        (Radix, [0, 32, 64, 128, 4096], {"page_size": 4}),
        (Blocks, [1, 3, 6, 10, 20, 1000], {"block_size": 8}),
    ):
        got = curve(reqs, kind, caps, **params)
        assert got == [sum(replay(reqs, kind(c, **params))) for c in caps]


def test_a_replay_says_whether_it_evicted_and_ran_over() -> None:
    a = PrefixRequest(tuple(range(1, 21)), arrive=0, finish=1)
    b = PrefixRequest(tuple(range(101, 131)), arrive=2, finish=3)
    for cache in (Radix(40), Blocks(6, 8)):
        assert run([a, b], cache).evicted and not run([a, b], cache).over
    # a conversation's running turn holds its whole history: past the capacity, it runs over
    tight = run(chat(4), Radix(50))
    assert not tight.evicted and tight.over > 0
    assert run(chat(4), Blocks(5, 8)).over > 0


@pytest.mark.parametrize(
    ("reqs", "cache", "message"),
    [
        ([PrefixRequest(())], Radix(10), "no prompt tokens"),
        ([PrefixRequest((1,), arrive=5, finish=4)], Radix(10), "finishes"),
        ([PrefixRequest((1, 2), extra=((1, 5, "h"),))], Blocks(10), "outside"),
        ([PrefixRequest((1,))], Radix(-1), "capacity_tokens"),
        ([PrefixRequest((1,))], Blocks(0), "num_blocks"),
    ],
)
def test_bad_input_is_refused_in_one_line(reqs: list[PrefixRequest], cache: Radix | Blocks, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        replay(reqs, cache)


def random_chats(seed: int, n: int) -> list[PrefixRequest]:
    """Interleaved chats with shared system prompts, images, identical prompts and overlapping lives."""
    rng = random.Random(seed)
    systems = [tuple(rng.randrange(10, 99) for _ in range(rng.randrange(1, 40))) for _ in range(3)]
    chats: list[tuple[tuple[int, ...], tuple[tuple[int, int, str], ...]] | None] = [None] * 8
    out: list[PrefixRequest] = []
    t = 0
    for _ in range(n):
        c = rng.randrange(len(chats))
        toks, extra = chats[c] or (rng.choice(systems), ())
        add = [rng.randrange(10, 99) for _ in range(rng.randrange(0, 20))]
        items = list(extra)
        if rng.random() < 0.3:
            h = rng.randrange(4)
            items.append((len(toks) + len(add), 7, f"img{h}"))
            add += [1_000_000 + h] * 7
        prompt = toks + tuple(add) if toks or add else (5,)
        reply = tuple(rng.randrange(10, 99) for _ in range(rng.randrange(0, 12)))
        life = rng.randrange(0, 50)
        out.append(PrefixRequest(prompt, reply, tuple(items), arrive=t, finish=t + life))
        chats[c] = None if len(prompt) > 120 or rng.random() < 0.1 else (prompt + reply, tuple(items))
        t += rng.randrange(0, 15)
    return out


@pytest.mark.parametrize("seed", range(6))
def test_the_replay_is_the_transcription_of_the_engines_code_on_random_chats(seed: int) -> None:
    reqs = random_chats(seed, 150)
    for page in (1, 4):
        top = never_evicts(reqs, Radix, page_size=page)
        for cap in sorted({0, 1, top // 8, top // 4, top // 3, top // 2, 2 * top // 3, top - 1, top}):
            assert replay(reqs, Radix(cap, page)) == prefix_reference.replay(reqs, Radix(cap, page)), (page, cap)
    top = never_evicts(reqs, Blocks, block_size=4)
    for blocks in sorted({1, 2, top // 8, top // 4, top // 2, top - 1, top}):
        assert replay(reqs, Blocks(blocks, 4)) == prefix_reference.replay(reqs, Blocks(blocks, 4)), blocks


@pytest.mark.parametrize("seed", range(6))
def test_block_replays_at_any_size_are_each_one_replay(seed: int) -> None:
    reqs = random_chats(seed, 150)
    for size in (1, 4, 16):
        each = BlockReplays(reqs, size)
        top = never_evicts(reqs, Blocks, block_size=size)
        assert each.saturated == top
        # out of order, repeated, and past the size that never evicts: each point its own replay
        for blocks in [top // 2, 2, top + 5, top // 3, top - 1, 2, top, 1]:
            if blocks >= 1:
                assert each.served(blocks) == replay(reqs, Blocks(blocks, size)), (size, blocks)
