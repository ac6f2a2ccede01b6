"""The caches list for vLLM from traffic: the launch's layout and sizes, the curve, the recommendations."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from mmpool_cli.engines.vllm import cache_items, cache_traffic, caches, encoder_replay, processor_cache, versions
from mmpool_cli.engines.vllm.gib import bytes_of as gib_bytes
from mmpool_cli.engines.vllm.plan_encoder import qwen_vision
from mmpool_cli.engines.vllm.request import VllmRequest
from mmpool_cli.workload import hf

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "traffic" / "vllm-chats.jsonl"


@pytest.fixture(scope="module")
def traffic() -> cache_traffic.ImageTraffic:
    return cache_traffic.read([str(EXAMPLE)])


def _req(**kw) -> VllmRequest:
    return VllmRequest(release=versions.release("0.34.0"), model=hf.resolve("qwen2.5-vl"), **kw)


def test_the_processor_entry_replays_the_launchs_layout_at_its_size_and_along_the_curve(traffic):
    entry = caches.processor_entry(_req(), traffic)
    assert (entry["name"], entry["engine"], entry["layout"]) == ("processor", "vllm", "lru")
    assert entry["size_bytes"] == 4 << 30 and entry["lookups"] == traffic.images == 103
    assert 0 < entry["hits"] < entry["lookups"]
    sizes = [p["size_bytes"] for p in entry["curve"]]
    assert sizes == sorted(sizes) and len(sizes) >= 40
    assert entry["unbounded_hits"] == max(p["hits"] for p in entry["curve"])
    # the setting's bytes, as vLLM reads the float, reach 99 % of the hits of a cache that never evicts
    gib = entry["recommended_setting"].removeprefix("--mm-processor-cache-gb ")
    assert gib_bytes(float(gib)) == entry["recommended_bytes"]
    assert entry["recommended_cost"]["hits"] * 100 >= 99 * entry["unbounded_hits"]
    # the host RAM of a launch with it is the plan's, engine core and render-only cache included
    assert entry["recommended_cost"]["host_bytes"] == 2 * entry["recommended_bytes"]


def test_two_api_processes_each_hold_their_own_cache(traffic):
    dp = processor_cache.DataParallel(size=2)
    entry = caches.processor_entry(_req(dp=dp), traffic)
    assert entry["layout"] == "processor_only" and entry["api_processes"] == 2
    assert len(entry["hits_per_api_process"]) == 2 and sum(entry["hits_per_api_process"]) == entry["hits"]
    one = caches.processor_entry(_req(), traffic)
    assert entry["hits"] < one["hits"]  # a chat's turns are dealt to both processes: each misses the other's
    assert entry["recommended_cost"]["host_bytes"] == 2 * 2 * entry["recommended_bytes"]


def test_the_shm_type_replays_the_ring(traffic):
    entry = caches.processor_entry(_req(cache_type="shm"), traffic)
    assert entry["layout"] == "shm" and entry["hits"] > 0
    assert any("workers read" in note for note in entry["notes"])


def test_the_encoder_budget_recommended_is_the_smallest_with_no_wait(traffic):
    for window in (1, 3):
        entry = caches.encoder_entry(_req(), traffic, window)
        tokens = entry["recommended_tokens"]
        assert any(f"at most {window} holding" in note for note in entry["notes"])
        tokens_of = cache_items.traffic_items(_req(), traffic).tokens
        at = encoder_replay.replay(traffic.requests, tokens_of, tokens, window)
        below = encoder_replay.replay(traffic.requests, tokens_of, tokens - 1, window)
        assert not at.waited and not at.refused and (below.waited or below.refused)
        assert entry["size_tokens"] == 114_688 and entry["recommended_bytes"] == tokens * 3584 * 2


def test_a_launch_error_and_an_unknown_processor_are_one_line(traffic):
    with pytest.raises(cache_traffic.CacheTrafficError, match=r"vllm-host-memory-exceeded.*host RAM") as e:
        caches.caches(_req(host_memory=1 << 30), traffic)
    assert "\n" not in str(e.value)
    other = dataclasses.replace(_req(), model=hf.resolve("kimi-vl"))
    with pytest.raises(cache_traffic.CacheTrafficError, match="knows the processed items of qwen2-vl"):
        caches.caches(other, traffic)


def test_grid_is_integer_and_spans_its_ends():
    points = caches.grid(6_096_408, 729_082_944)
    assert points[0] == 6_096_408 and points[-1] == 729_082_944
    assert all(isinstance(p, int) for p in points) and len(set(points)) == len(points)


def test_the_smallest_size_reaching_the_target_is_searched_within_the_first_grid_gap_that_reaches_it():
    points = [10, 20, 30, 40]

    def run(c: int) -> int:  # not monotone: 25..36 lose a hit that 14..24 had
        return 5 if c >= 37 else 2 if c >= 25 else 3 if c >= 14 else 1

    assert caches.smallest_reaching(run, points, 3) == 14
    assert caches.smallest_reaching(run, points, 5) == 37


def test_a_traces_items_replay_as_the_bodies_they_came_from(traffic, float32_items):
    from mmpool_cli.engines.vllm import item_bytes

    # a trace carries SGLang's float32 pixel_values (what 'mmpool trace' writes)
    vision, tokens = qwen_vision(_req()), cache_items.traffic_items(_req(), traffic).tokens
    pixels = {k: item_bytes.qwen_pixels(vision, n, float32_items) for k, n in tokens.items()}
    items = [(f"r{i}", "image", key, pixels[key]) for i, keys in enumerate(traffic.requests) for key in keys]
    items.insert(3, ("r1", "video", None, 1000))
    traced = cache_traffic.from_items(items, "prod.jsonl")
    assert traced.not_replayed == {"video items": 1} and traced.images == traffic.images
    assert caches.processor_entry(_req(), traced)["curve"] == caches.processor_entry(_req(), traffic)["curve"]
    bad = cache_traffic.from_items([("r0", "image", "k", 1000)], "prod.jsonl")
    with pytest.raises(cache_traffic.CacheTrafficError, match="trace it with the same --model"):
        caches.processor_entry(_req(), bad)


def test_no_request_waits_at_the_no_wait_budget_and_one_waits_below_it(traffic):
    tokens = cache_items.traffic_items(_req(), traffic).tokens
    for window in (1, 2, 5):
        budget = encoder_replay.no_wait_budget(traffic.requests, tokens, window)
        replayed = encoder_replay.replay(traffic.requests, tokens, budget, window)
        below = encoder_replay.replay(traffic.requests, tokens, budget - 1, window)
        assert not replayed.waited and not replayed.refused and (below.waited or below.refused)
        assert budget < sum(tokens.values())


@pytest.mark.parametrize(
    "kw", [{}, {"cache_type": "shm"}, {"dp": processor_cache.DataParallel(size=2)}, {"release": "0.33.0"}]
)
def test_every_processor_curve_point_is_a_single_python_replay(traffic, kw):
    from mmpool_cli.engines.vllm import processor_replay

    if "release" in kw:
        kw = {"release": versions.release(kw["release"])}
    req = dataclasses.replace(_req(), **kw)
    entry = caches.processor_entry(req, traffic)
    items = cache_items.traffic_items(req, traffic)
    layout = {"lru": "lru", "shm": "shm"}.get(entry["layout"], "processor_only")
    sizes = items.shm if layout == "shm" else items.processed
    work = items.processed

    def replay(size: int) -> processor_replay.ReplayResult:
        return processor_replay.replay(
            traffic.requests,
            sizes,
            size,
            layout,
            api_processes=entry["api_processes"],
            work=work,
            release=req.release.version,
            native=False,
        )

    for point in entry["curve"]:
        r = replay(point["size_bytes"])
        assert (point["hits"], point["work_saved"]) == (r.total_hits, r.saved), point
    assert entry["recommended_cost"]["hits"] == replay(entry["recommended_bytes"]).total_hits
    at = replay(entry["size_bytes"])
    assert (entry["hits"], entry["hits_per_api_process"], entry["work_saved"]) == (at.total_hits, at.hits, at.saved)


@pytest.mark.parametrize("window", [1, 4])
def test_every_encoder_curve_point_is_a_single_python_replay(traffic, window):
    entry = caches.encoder_entry(_req(), traffic, window)
    tokens = cache_items.traffic_items(_req(), traffic).tokens
    below = 0
    for point in entry["curve"]:
        r = encoder_replay.replay(traffic.requests, tokens, point["size_tokens"], window, native=False)
        assert (point["hits"], point["work_saved"], point["waits"]) == (r.hits, r.saved, len(r.waited)), point
        below += point["size_tokens"] < entry["recommended_tokens"]
    assert below  # some points are below the no-wait budget (replayed), the rest from one pass
    assert entry["unbounded_hits"] == encoder_replay.replay(traffic.requests, tokens, 10**9, window).hits
