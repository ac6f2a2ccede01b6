"""The processor cache replay equals vLLM 0.30.0-0.34.0's own cache classes (built by its factories.py) driven with the
same items in the same order: every request's flags, the counters, the failures, at every recorded size."""

from __future__ import annotations

import pytest

from mmpool_cli.engines.vllm import cache_items, processor_replay


@pytest.mark.parametrize("release", ["0.30.0", "0.31.0", "0.32.0", "0.33.0", "0.34.0"])
def test_processor_cache_hits_equal_vllms_at_every_recorded_size(
    cache_releases, cache_vision, cache_tokens, float32_items, release
):
    cache_recorded = cache_releases[release]
    rows = cache_recorded["processor"]
    assert {(r["type"], r["api"], r["layout"]) for r in rows} == {
        ("lru", 1, "lru"),
        ("shm", 1, "shm"),
        ("lru", 2, "processor_only"),
    }
    assert {r["sequence"] for r in rows} == {"chat", "popular", "large"}
    assert any(r["errors"] for r in rows) and any(0 < sum(r["hits"]) < sum(r["total"]) for r in rows)
    for row in rows:
        family = row["family"]
        size = cache_items.shm_object_bytes if row["type"] == "shm" else cache_items.item_size
        sizes = {k: size(cache_vision[family], n, float32_items) for k, n in cache_tokens[family].items()}
        reqs = cache_recorded["families"][family]["sequences"][row["sequence"]]
        got = processor_replay.replay(
            reqs, sizes, row["capacity"], row["layout"], api_processes=row["api"], release=release, flags=True
        )
        where = (release, family, row["sequence"], row["layout"], row["capacity"])
        assert got.flags == row["flags"], where
        assert got.hits == row["hits"] and got.lookups == row["total"], where
        want = [(e["request"], e["where"], tuple(e.get("keys", ()))) for e in row["errors"]]
        assert got.failed == want, where


def test_an_item_larger_than_the_cache_is_never_cached_and_evicts_nothing():
    got = processor_replay.replay([["a"], ["big"], ["a"]], {"a": 4, "big": 11}, 10, "processor_only", flags=True)
    assert got.flags == ["M", "M", "H"] and got.total_hits == 1


def test_before_0_34_a_processor_only_cache_fails_a_request_that_evicts_its_own_hits():
    # b was cached when the request came; a's insert evicts it, and 0.33.0 no longer has its payload
    reqs = [["b"], ["a", "b"]]
    old = processor_replay.replay(reqs, {"a": 6, "b": 5}, 10, "processor_only", release="0.33.0")
    new = processor_replay.replay(reqs, {"a": 6, "b": 5}, 10, "processor_only", release="0.34.0")
    assert old.failed == [(1, "sender", ())] and new.failed == []


def _random_traffic(rng, keys: int, requests: int) -> tuple[list[list[str]], dict[str, int], dict[str, int]]:
    names = [f"k{i}" for i in range(keys)]
    sizes = {k: rng.choice([rng.randint(0, 20), rng.randint(1, 100)]) for k in names}
    work = {k: rng.randint(0, 50) for k in names}
    reqs = [[rng.choice(names[: rng.randint(1, keys)]) for _ in range(rng.randint(1, 6))] for _ in range(requests)]
    return reqs, sizes, work


@pytest.mark.skipif(processor_replay.FAST is None, reason="the compiled cache replay is not built (setup.py build_ext)")
def test_the_compiled_replay_equals_the_python_replay_on_random_traffic():
    import random

    rng = random.Random(41)
    failures = {"sender": 0, "engine core": 0}
    for _ in range(150):
        reqs, sizes, work = _random_traffic(rng, rng.randint(1, 30), rng.randint(1, 40))
        for layout in ("processor_only", "lru", "shm"):
            for release in ("0.33.0", "0.34.0"):
                for capacity in (rng.randint(1, 150), rng.randint(1, 40)):
                    kw = {"api_processes": rng.randint(1, 3), "max_object": rng.randint(1, 120)}
                    kw |= {"work": work, "release": release}
                    want = processor_replay.replay(reqs, sizes, capacity, layout, native=False, **kw)
                    got = processor_replay.replay(reqs, sizes, capacity, layout, native=True, **kw)
                    assert (got.hits, got.lookups, got.saved, got.failed) == (
                        want.hits,
                        want.lookups,
                        want.saved,
                        want.failed,
                    ), (layout, release, capacity, reqs, sizes)
                    for _, where, _ in want.failed:
                        failures[where] += 1
    assert failures["sender"] and failures["engine core"]  # the failures' paths were taken


@pytest.mark.skipif(processor_replay.FAST is None, reason="the compiled cache replay is not built (setup.py build_ext)")
@pytest.mark.parametrize("release", ["0.30.0", "0.34.0"])
def test_the_compiled_replay_gives_vllms_counters_at_every_recorded_size(
    cache_releases, cache_vision, cache_tokens, float32_items, release
):
    recorded = cache_releases[release]
    for row in recorded["processor"]:
        family = row["family"]
        size = cache_items.shm_object_bytes if row["type"] == "shm" else cache_items.item_size
        sizes = {k: size(cache_vision[family], n, float32_items) for k, n in cache_tokens[family].items()}
        reqs = recorded["families"][family]["sequences"][row["sequence"]]
        got = processor_replay.replay(
            reqs, sizes, row["capacity"], row["layout"], api_processes=row["api"], release=release, native=True
        )
        assert got.hits == row["hits"] and got.lookups == row["total"], (family, row["sequence"], row["capacity"])
        assert got.failed == [(e["request"], e["where"], tuple(e.get("keys", ()))) for e in row["errors"]]
