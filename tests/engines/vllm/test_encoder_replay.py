"""The encoder cache replay makes EncoderCacheManager's own decisions (vLLM 0.30.0-0.34.0) under the same admission order."""

from __future__ import annotations

import pytest

from mmpool_cli.engines.vllm import encoder_replay


@pytest.mark.parametrize("release", ["0.30.0", "0.31.0", "0.32.0", "0.33.0", "0.34.0"])
def test_encoder_cache_decisions_equal_encoder_cache_managers(cache_releases, cache_tokens, release):
    cache_recorded = cache_releases[release]
    rows = cache_recorded["encoder"]
    kinds = {entry[0] for row in rows for entry in row["log"]}
    assert {"alloc", "hit", "dup", "wait", "step", "refuse", "free"} <= kinds
    for row in rows:
        family = row["family"]
        reqs = cache_recorded["families"][family]["sequences"][row["sequence"]]
        got = encoder_replay.replay(reqs, cache_tokens[family], row["budget"], row["window"], log=True)
        assert got.log == row["log"], (family, row["sequence"], row["budget"], row["window"])


def _random_traffic(rng) -> tuple[list[list[str]], dict[str, int]]:
    names = [f"k{i}" for i in range(rng.randint(1, 25))]
    tokens = {k: rng.randint(1, 80) for k in names}
    reqs = [[rng.choice(names) for _ in range(rng.randint(1, 5))] for _ in range(rng.randint(1, 30))]
    return reqs, tokens


@pytest.mark.skipif(encoder_replay.FAST is None, reason="the compiled cache replay is not built (setup.py build_ext)")
def test_the_compiled_replay_equals_the_python_replay_on_random_traffic_and_the_fixtures(cache_releases, cache_tokens):
    import random

    rng = random.Random(41)
    seen = {"waited": 0, "refused": 0, "recomputed": 0}
    cases = []
    for _ in range(200):
        reqs, tokens = _random_traffic(rng)
        cases += [(reqs, tokens, rng.randint(1, 200), w) for w in (1, 2, 4)]
    for recorded in cache_releases.values():
        for row in recorded["encoder"]:
            reqs = recorded["families"][row["family"]]["sequences"][row["sequence"]]
            cases.append((reqs, cache_tokens[row["family"]], row["budget"], row["window"]))
    for reqs, tokens, size, window in cases:
        want = encoder_replay.replay(reqs, tokens, size, window, native=False)
        got = encoder_replay.replay(reqs, tokens, size, window, native=True)
        fields = ("hits", "saved", "recomputed", "waited", "refused", "occupancy")
        assert [getattr(got, f) for f in fields] == [getattr(want, f) for f in fields], (reqs, tokens, size, window)
        seen["waited"] += len(want.waited)
        seen["refused"] += len(want.refused)
        seen["recomputed"] += want.recomputed
    assert all(seen.values())


def test_the_no_wait_budget_of_one_pass_is_the_replays_bisection_on_random_traffic():
    import random

    from mmpool_cli.engines.vllm.caches import smallest_without_wait

    rng = random.Random(7)
    for _ in range(300):
        reqs, tokens = _random_traffic(rng)
        for window in (1, 2, 3, 5):
            got = encoder_replay.no_wait_budget(reqs, tokens, window)

            # the replay at every budget to the whole traffic's tokens, bisected (python, the reference)
            def run(size: int, reqs=reqs, tokens=tokens, window=window) -> encoder_replay.EncoderReplay:
                return encoder_replay.replay(reqs, tokens, size, window, native=False)

            want = smallest_without_wait(run, 1, sum(tokens.values()))
            assert got == want, (reqs, tokens, window)
            if encoder_replay.FAST is not None:  # the compiled pass
                dense = encoder_replay.Dense.of(reqs, tokens)
                assert encoder_replay.no_wait_budget(reqs, tokens, window, dense=dense) == want
            below = encoder_replay.replay(reqs, tokens, got - 1, window, native=False) if got > 1 else None
            assert below is None or below.waited or below.refused


def test_from_the_no_wait_budget_up_one_pass_gives_each_budgets_replay():
    import random

    rng = random.Random(11)
    for _ in range(200):
        reqs, tokens = _random_traffic(rng)
        curves = [encoder_replay.curve_without_wait(reqs, tokens)]
        if encoder_replay.FAST is not None:
            curves.append(encoder_replay.curve_without_wait(encoder_replay.Dense.of(reqs, tokens), tokens))
        for window in (1, 2, 3, 5):
            least = encoder_replay.no_wait_budget(reqs, tokens, window)
            for size in sorted({least, least + 1, *(least + rng.randint(0, 300) for _ in range(6))}):
                want = encoder_replay.replay(reqs, tokens, size, window, native=False)
                assert not want.waited and not want.refused
                for curve in curves:
                    assert curve.at(size) == (want.hits, want.saved), (reqs, tokens, window, size)
