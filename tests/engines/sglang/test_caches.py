"""SGLang's caches as mmpool replays them, against SGLang 0.5.23's own classes driven by its own code.

tests/data/sglang_caches.json is written by scripts/sglang_cache_fixtures.py from the sglang==0.5.23
wheel: MultiModalStaticCache driven by mm_schedule's per-item and per-request functions, and
MultimodalPreprocessCache driven as the Qwen-VL processor drives it, each replayed at every size listed.
"""

from __future__ import annotations

import json
from collections import OrderedDict
from pathlib import Path
from typing import Any

import pytest

from mmpool_cli.engines.sglang import caches as rules
from mmpool_cli.engines.sglang.caches import caches, embedding_size, large_hopper, preprocess_size
from mmpool_cli.errors import MmpoolError
from mmpool_cli.inputs.traffic.cache_request import CacheRequest, ModelShape
from mmpool_cli.simulate.cache_report import CacheItem
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


def replay(looks: rules._Lookups, size: int, max_entries: int) -> int:
    """mmpool's lookups replayed at one size with SGLang's batch order: every lookup of a batch, then
    its hits used in order, then its misses stored in order (entries larger than the cache refused)."""
    cache: OrderedDict[int, int] = OrderedDict()
    used = hits = i = 0
    first: dict[int, int] = {}
    n = len(looks.keys)
    while i < n:
        j = i
        while j < n and looks.groups[j] == looks.groups[i]:
            j += 1
        hit, miss = [], []
        for k in range(i, j):
            s = first.setdefault(looks.keys[k], looks.sizes[k])
            if looks.keys[k] in cache:
                hits += looks.weights[k]
                hit.append(looks.keys[k])
            else:
                miss.append((looks.keys[k], s))
        for key in hit:
            cache.move_to_end(key)
        for key, s in miss:
            if s > size or key in cache:
                continue
            while cache and (used + s > size or (max_entries and len(cache) >= max_entries)):
                used -= cache.popitem(last=False)[1]
            cache[key] = s
            used += s
        i = j
    return hits


def lookups(sc: dict[str, Any]) -> tuple[rules._Lookups, rules._Lookups]:
    req = request(sc)
    width = rules._width(req)
    tokens = [rules._tokens(req, it) for it in req.items]
    return rules._embedding_lookups(req, tokens, width), rules._preprocess_lookups(req)


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_embedding_keys_sizes_and_call_order_equal_sglang_at_every_size(name: str) -> None:
    # mmpool's lookups (keys, bytes, batches) replayed at each size give SGLang's own hits
    sc = SCENARIOS[name]
    emb, _ = lookups(sc)
    want = sc["embedding"]
    assert [replay(emb, size, 0) for size in want["sizes"]] == want["hits"]


@pytest.mark.parametrize("name", [n for n in sorted(SCENARIOS) if "multi-image" not in n])
def test_preprocess_keys_sizes_and_call_order_equal_sglang_at_every_size(name: str) -> None:
    # exact where no request preprocesses several images in one batch at one size and not at another
    # (SGLang's size provider counts each image of a batch at the whole batch's pixels: docs/caches.md)
    sc = SCENARIOS[name]
    _, pre = lookups(sc)
    want = sc["preprocess"]
    got = [replay(pre, size, rules.PREPROCESS_MAX_ENTRIES) if size else 0 for size in want["sizes"]]
    if "multi-turn" in name:
        agree = sum(g == h for g, h in zip(got, want["hits"], strict=True))
        assert agree * 100 >= 80 * len(got)  # the batches of re-sent images that were evicted differ
    else:
        assert got == want["hits"]


@pytest.mark.parametrize("name", [n for n in sorted(SCENARIOS) if "multi-turn" in n])
def test_one_pass_curve_equals_sglang_at_every_size(name: str) -> None:
    # multi-turn chats: each turn's re-sent images before its new one, so one stack holds the order
    sc = SCENARIOS[name]
    curve = caches(request(sc)).caches[0].curve
    want = sc["embedding"]
    assert [curve.at(size)[0] for size in want["sizes"]] == want["hits"]


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_one_pass_curve_near_sglang_where_batches_reorder(name: str) -> None:
    sc = SCENARIOS[name]
    report = caches(request(sc))
    for cache, kind in zip(report.caches, ("embedding", "preprocess"), strict=True):
        want = sc[kind]
        got = [cache.curve.at(size)[0] if size else 0 for size in want["sizes"]]
        agree = sum(g == h for g, h in zip(got, want["hits"], strict=True))
        assert agree * 100 >= 55 * len(got), (kind, agree, len(got))
        assert cache.curve.unbounded[0] == max(want["hits"])


def test_fixtures_cover_the_cases() -> None:
    names = " ".join(SCENARIOS)
    for needed in ("qwen2.5-vl", "qwen3-vl", "multi-turn", "multi-image", "video", "larger than the cache"):
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
