"""SGLang's caches as mmpool replays them, against SGLang 0.5.23's own classes driven by its own code.

tests/data/sglang_caches.json is written by scripts/sglang_cache_fixtures.py from the sglang==0.5.23
wheel: MultiModalStaticCache driven by mm_schedule's per-item and per-request functions, and
MultimodalPreprocessCache driven as the Qwen-VL processor drives it, each replayed at every size listed.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from mmpool_cli.caches.replay import ONE_PASS, REPLAYED, one_pass, replay
from mmpool_cli.caches.report import CacheItem
from mmpool_cli.engines.sglang import caches as rules
from mmpool_cli.engines.sglang.caches import caches, embedding_size, large_hopper, preprocess_size
from mmpool_cli.errors import MmpoolError
from mmpool_cli.inputs.traffic.cache_request import CacheRequest, ModelShape
from mmpool_cli.workload.families import family

FIXTURE = json.loads((Path(__file__).parents[2] / "data" / "sglang_caches.json").read_text())
PATCH_DIM = {"qwen2.5-vl": 3 * 2 * 14 * 14, "qwen3-vl": 3 * 2 * 16 * 16}
SCENARIOS = {sc["name"]: sc for sc in FIXTURE["scenarios"]}


def request(sc: dict[str, Any], **kw: Any) -> CacheRequest:
    fam = family(sc["family"])
    items = [
        CacheItem(f"r{n}", it["kind"], it["key"], it["tokens"] * 4 * PATCH_DIM[sc["family"]] * 4, it["kind"])
        for n, req in enumerate(sc["requests"])
        for it in req
    ]
    deep = 3 if sc["family"] == "qwen3-vl" else None
    return CacheRequest(
        family=fam,
        settings=dict(fam.settings),
        items=items,
        source=sc["name"],
        shape=ModelShape(sc["hidden_size"], deep),
        environ=kw.pop("environ", {"SGLANG_VLM_CACHE_SIZE_MB": "100"}),
        **kw,
    )


def lookups(sc: dict[str, Any]) -> tuple[rules._Lookups, rules._Lookups]:
    req = request(sc)
    width = rules._width(req)
    tokens = [rules._tokens(req, it) for it in req.items]
    return rules.embedding_lookups(req, tokens, width), rules._preprocess_lookups(req)


@pytest.mark.parametrize("name", sorted(SCENARIOS))
@pytest.mark.parametrize("kind", ["embedding", "preprocess"])
def test_replay_equals_sglang_at_every_size(name: str, kind: str) -> None:
    # mmpool's lookups (keys, bytes, batches, the batch tensor's shared bytes) replayed at each size
    # give SGLang's own hits, exactly
    sc = SCENARIOS[name]
    emb, pre = lookups(sc)
    looks = (emb if kind == "embedding" else pre).neutral()
    want = sc[kind]
    got = [replay(looks, size) if size else (0, 0) for size in want["sizes"]]
    assert [h for h, _ in got] == want["hits"]
    if kind == "preprocess":  # SGLang's misses: one per distinct image missed (the work a hit saves counts them)
        misses = [pre.unique - w if size else 0 for size, (_, w) in zip(want["sizes"], got, strict=True)]
        assert misses == want["misses"]


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_embedding_lookups_are_counted_as_sglang_counts_them_at_every_size(name: str) -> None:
    # an image a request holds twice is looked up again where its first lookup missed (mm_schedule.py's
    # second get_single), once where it hit: the lookups, not only the hits, are SGLang's
    sc = SCENARIOS[name]
    emb, _ = lookups(sc)
    want = sc["embedding"]
    assert [rules.embedding_lookups_at(emb, size) for size in want["sizes"]] == want["lookups"]


def test_the_report_counts_the_deployments_lookups_as_sglang() -> None:
    sc = SCENARIOS["qwen2.5-vl multi-image requests"]
    emb, _ = lookups(sc)
    assert emb.dups is not None and sum(emb.dups) > 0  # the scenario repeats images inside requests
    for mb in (0, 1, 100):
        report = caches(request(sc, environ={"SGLANG_VLM_CACHE_SIZE_MB": str(mb)}))
        cache = report.caches[0]
        assert cache.counted_lookups == rules.embedding_lookups_at(emb, mb << 20)
        assert report.to_data()["caches"][0]["lookups"] == cache.counted_lookups
    assert rules.embedding_lookups_at(emb, 0) == sum(len(r) for r in sc["requests"])  # off: every image misses


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_reported_curve_equals_sglang_at_every_point(name: str) -> None:
    # every point the report gives is SGLang's hits at that size: one pass where it is exact at every
    # size, else a replay at each point (the deployment's size and the recommendation among them)
    sc = SCENARIOS[name]
    report = caches(request(sc, preprocess_mb=1))
    emb, pre = lookups(sc)
    for cache, looks in zip(report.caches, (emb, pre), strict=True):
        lk = looks.neutral()
        sizes = {s for s, _, _ in cache.curve.steps} | {cache.size_bytes}
        if cache.recommendation is not None:
            sizes.add(cache.recommendation.size_bytes)
        for size in sizes:
            assert cache.curve.at(size)[0] == replay(lk, size)[0], (cache.name, size)
        if cache.method == REPLAYED:
            assert one_pass(lk) is None
            assert cache.size_bytes in sizes
        assert cache.curve.unbounded[0] == max(sc["embedding" if cache.name == "embedding" else "preprocess"]["hits"])


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_one_pass_curve_equals_sglang_at_every_size(name: str) -> None:
    # the embedding cache on every traffic shape (multi-turn chats re-sending several images, repeated
    # multi-image requests, a video, an item larger than the cache), and the preprocess cache on
    # streaming traffic: one pass follows SGLang's order of each size, so the curve (a step function)
    # is SGLang's hits at every size, hits and misses
    sc = SCENARIOS[name]
    report = caches(request(sc, preprocess_mb=1))
    _, pre = lookups(sc)
    for cache in report.caches:
        if cache.name == "preprocess" and "streaming" not in name:
            continue
        assert cache.method == ONE_PASS
        want = sc[cache.name]
        got = [cache.curve.at(size) if size else (0, 0) for size in want["sizes"]]
        assert [h for h, _ in got] == want["hits"]
        if cache.name == "preprocess":
            assert [pre.unique - w if size else 0 for size, (_, w) in zip(want["sizes"], got, strict=True)] == want[
                "misses"
            ]


@pytest.mark.parametrize("name", [n for n in sorted(SCENARIOS) if "streaming" not in n])
def test_where_one_pass_is_not_exact_the_curve_is_replayed(name: str) -> None:
    # every scenario here has a multi-image request re-sending an image to the preprocess cache, whose
    # entries are views of the request's batch of misses: an entry's bytes depend on the size, so
    # each point is replayed; the embedding cache's entries are its own, so it is one pass
    report = caches(request(SCENARIOS[name]))
    assert [c.method for c in report.caches] == [ONE_PASS, REPLAYED]
    assert [c["curve_method"] for c in report.to_data()["caches"]] == [ONE_PASS, REPLAYED]


def test_one_pass_where_exact_equals_the_replay() -> None:
    # the scenario's single-item requests alone: one pass is exact, and equals the replay at every size
    sc = dict(SCENARIOS["qwen2.5-vl a video and an item larger than the cache"])
    sc["requests"] = [r for r in sc["requests"] if len(r) == 1]
    report = caches(request(sc, preprocess_mb=1))
    emb, pre = lookups(sc)
    for cache, looks in zip(report.caches, (emb, pre), strict=True):
        assert cache.method == ONE_PASS
        lk = looks.neutral()
        edges = {s for s, _, _ in cache.curve.steps}
        for size in sorted(edges | {e - 1 for e in edges if e} | {e + 1 for e in edges}):
            assert cache.curve.at(size)[0] == (replay(lk, size)[0] if size else 0), (cache.name, size)


def test_fixtures_cover_the_cases() -> None:
    names = " ".join(SCENARIOS)
    for needed in (
        "qwen2.5-vl",
        "qwen3-vl",
        "multi-turn",
        "multi-image",
        "video",
        "larger than the cache",
        "streaming",
    ):
        assert needed in names
    big = SCENARIOS["qwen3-vl a video and an item larger than the cache"]["embedding"]
    assert big["hits"] != sorted(big["hits"])  # an entry larger than the cache makes hits fall with size
    assert any(
        it["kind"] == "video"
        for r in SCENARIOS["qwen3-vl a video and an item larger than the cache"]["requests"]
        for it in r
    )


def test_sizes_as_sglang_reads_them() -> None:
    sc = SCENARIOS["qwen2.5-vl multi-turn chats"]
    assert embedding_size(request(sc, environ={})) == (100 << 20, "SGLANG_VLM_CACHE_SIZE_MB=100 (SGLang's default)")
    assert embedding_size(request(sc, environ={"SGLANG_VLM_CACHE_SIZE_MB": "1GB"}))[0] == 100 << 20
    assert embedding_size(request(sc, environ={"SGLANG_VLM_CACHE_SIZE_MB": "-5"}))[0] == 0
    assert preprocess_size(request(sc))[0] == 0  # the Qwen-VL processor's own size: off
    assert preprocess_size(request(sc, preprocess_mb=3, workers=2))[0] == 3 * (1 << 20) // 2


def test_qwen3_vl_override_needs_the_gpu() -> None:
    sc = SCENARIOS["qwen3-vl multi-turn chats"]
    with pytest.raises(MmpoolError, match="--gpu-name"):
        embedding_size(request(sc, environ={}))
    assert embedding_size(request(sc, environ={}, gpu_name="NVIDIA H100 80GB HBM3"))[0] == 0
    assert embedding_size(request(sc, environ={}, gpu_name="A100-SXM4-80GB"))[0] == 100 << 20
    assert embedding_size(request(sc, environ={"SGLANG_VLM_CACHE_SIZE_MB": "64"}, gpu_name="H200"))[0] == 64 << 20
    assert large_hopper("GH200") and large_hopper("h20") and not large_hopper("A10") and not large_hopper("H2000")


def test_unknown_hidden_size_is_one_line() -> None:
    sc = SCENARIOS["qwen2.5-vl multi-turn chats"]
    req = request(sc)
    bad = CacheRequest(**{**req.__dict__, "shape": ModelShape(None)})
    with pytest.raises(MmpoolError, match="--hidden-size") as e:
        caches(bad)
    assert "\n" not in str(e.value)


def test_same_bytes_hit_whatever_the_request() -> None:
    sc = {
        "family": "qwen2.5-vl",
        "hidden_size": 8,
        "name": "two",
        "requests": [[{"key": "k", "tokens": 4, "kind": "image"}]] * 2,
    }
    report = caches(request(sc))
    assert report.caches[0].hits == 1
    assert report.caches[0].curve.at(4 * 8 * 2) == (1, 4)  # 4 tokens x 8 x 2 bytes; 4 encoder tokens saved
