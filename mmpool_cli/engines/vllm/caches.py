"""vLLM's processor cache and encoder cache replayed over logged traffic: the ``caches`` list of ``mmpool cache``.

Each entry has the shape every engine's caches share: ``name``, ``engine``, ``size_bytes`` (the
deployment's), ``lookups``, ``hits``, ``curve`` (``[{size_bytes, hits}]``) and ``recommended_bytes``,
plus what is vLLM's own. Sizes come from the launch through the vLLM plan (``make_plan``: the same
layout, API processes and encoder budget ``plan --engine vllm`` prints); items from the traffic
(``cache_traffic``) and the model's processing (``item_bytes``, ``cache_items``: the Qwen-VL families and
Gemma 3).

- processor: the hits at the curve's sizes, a geometric grid from the smallest item to everything
  the traffic holds, each exact: from one stack-distance pass (``caches.lru.batch_curve``) at every
  size where no request's images outweigh the cache, else an exact replay (``processor_replay``,
  compiled where built); the deployment's size is replayed (its per-process hits and failures).
  vLLM's rules make the hits not monotone in the size; ``recommended_bytes`` is the
  smallest of those sizes that gets the hits of a cache that never evicts, with the host RAM a
  launch at that size takes on the node (``processor_cache.plan``, the shm ring's handle secret and
  the render-only caches included).
- encoder: ``recommended_tokens`` is the smallest budget where no request waits, in one pass
  (``encoder_replay.no_wait_budget``); from it up the curve is one stack-distance pass
  (``encoder_replay.curve_without_wait``), below it each point a replay (``encoder_replay``).
  Pure core: standard library only.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from fractions import Fraction
from typing import Any

from mmpool_cli.caches.lru import Batches, batch_curve
from mmpool_cli.caches.replay import REPLAYED
from mmpool_cli.core.findings import Severity
from mmpool_cli.engines.vllm import cache_items, encoder_replay, item_bytes, processor_cache, processor_replay
from mmpool_cli.engines.vllm import prefix as vllm_prefix
from mmpool_cli.engines.vllm.cache_traffic import CacheTrafficError, ImageTraffic
from mmpool_cli.engines.vllm.gib import bytes_of
from mmpool_cli.engines.vllm.plan import _gib_for, make_plan
from mmpool_cli.engines.vllm.request import VllmRequest

CURVE_POINTS = 48
DEFAULT_TARGET = Fraction(99)  # percent of an unbounded cache's hits, as for every engine's caches
MAX_OCCUPANCY_POINTS = 1000


def grid(lo: int, hi: int, points: int = CURVE_POINTS) -> list[int]:
    """About ``points`` integer sizes from ``lo`` to ``hi``, evenly spaced on a log scale.

    >>> grid(1, 1000, 4)
    [1, 10, 100, 1000]
    """
    lo, hi = max(1, lo), max(1, hi)
    if hi <= lo:
        return [lo]
    out = {lo, hi}
    # lo * (hi/lo)^(i/(points-1)), in integers: the largest s with s^(points-1) <= lo^(points-1-i) * hi^i
    n = points - 1
    for i in range(1, n):
        target = lo ** (n - i) * hi**i
        s = _iroot(target, n)
        out.add(s)
    return sorted(out)


def _iroot(x: int, n: int) -> int:
    """The largest integer s with s**n <= x."""
    lo, hi = 0, 1
    while hi**n <= x:
        hi *= 2
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if mid**n <= x:
            lo = mid
        else:
            hi = mid
    return lo


def smallest_reaching(
    run: Callable[[int], int], points: list[int], need: int, same: Callable[[int, int], bool] | None = None
) -> int:
    """The smallest grid point with at least ``need`` hits, lowered by bisection towards the point before
    it (hits need not grow with the size, so the grid point is found first and only its gap searched).
    ``same(lo, hi)``: the sizes between the two give one answer (one setting), so the search may stop."""
    i = next(i for i, c in enumerate(points) if run(c) >= need)
    lo, hi = (points[i - 1] + 1 if i else 1), points[i]
    while lo < hi and not (same is not None and same(lo, hi)):
        mid = (lo + hi) // 2
        if run(mid) >= need:
            hi = mid
        else:
            lo = mid + 1
    return hi


def smallest_without_wait(run: Callable[[int], encoder_replay.EncoderReplay], lo: int, hi: int) -> int:
    """The smallest encoder budget from ``lo`` to ``hi`` (one where no request waits) at which no request
    waits or is refused: exact by bisection, since no wait at one budget means the same admissions at
    every larger one. The reference of ``encoder_replay.no_wait_budget``, which finds it in one pass."""
    while lo < hi:
        mid = (lo + hi) // 2
        probe = run(mid)
        lo, hi = (mid + 1, hi) if probe.waited or probe.refused else (lo, mid)
    return lo


def processor_entry(
    req: VllmRequest,
    traffic: ImageTraffic,
    progress: Callable[[], None] | None = None,
    target: Fraction = DEFAULT_TARGET,
    *,
    known: cache_items.TrafficItems | None = None,
) -> dict[str, Any]:
    """The processor cache's entry of the ``caches`` list (``known``: the items' ``traffic_items``, if made)."""
    plan = make_plan(req)
    pc = plan.processor_cache
    items = cache_items.traffic_items(req, traffic) if known is None else known
    # with the cache off (0 GiB), the curve is of the layout the launch would get with one
    enabled = pc if pc.layout != "disabled" else processor_cache.plan(1, req.cache_type, req.dp)
    layout: processor_replay.Layout = "processor_only"
    if enabled.layout in ("lru", "shm"):
        layout = "shm" if enabled.layout == "shm" else "lru"
    proc = item_bytes.of_request(req)
    sizes = items.shm if layout == "shm" else items.processed
    processed = items.processed
    max_object = req.shm_max_object_mb << 20
    api = max(1, enabled.api_processes) if layout == "processor_only" else 1
    release = req.release.version
    dense = Batches.of(traffic.requests, sizes, processed)
    # one pass gives every size where no request's images outweigh the cache; the rest are replayed
    one_pass = None if layout == "shm" else batch_curve(dense.keys, dense.starts, dense.sizes, dense.work, api)

    def replay(capacity: int) -> processor_replay.ReplayResult:
        if progress is not None:
            progress()
        if processor_replay.FAST is not None:
            return processor_replay.replay_dense(dense, capacity, layout, api, max_object, release)
        return processor_replay.replay(
            traffic.requests,
            sizes,
            capacity,
            layout,
            api_processes=api,
            max_object=max_object,
            work=processed,
            release=release,
        )

    seen: dict[int, tuple[int, int]] = {}

    def run(capacity: int) -> tuple[int, int]:
        """(hits, processed bytes saved) at ``capacity`` bytes, each exact."""
        if capacity not in seen:
            if one_pass is not None and one_pass.exact(capacity):
                seen[capacity] = one_pass.at(capacity)
            else:
                r = replay(capacity)
                seen[capacity] = (r.total_hits, r.saved)
        return seen[capacity]

    # at these bytes nothing is ever evicted (a ring twice its objects never wraps)
    everything = sum(sizes.values()) * (2 if layout == "shm" else 1)
    points = grid(min(sizes.values()), everything)
    curve = [(c, *run(c)) for c in points]
    unbounded_hits, unbounded_saved = run(everything)
    need = _hits_needed(unbounded_hits, target)
    recommendation = None
    if unbounded_hits:
        # the setting is a float of GiB in 4 digits: the search stops where both ends give the same one
        smallest = smallest_reaching(lambda c: run(c)[0], points, need, lambda lo, hi: _gib_for(lo) == _gib_for(hi))
        text = _gib_for(smallest)
        setting_bytes = bytes_of(float(text))
        host = processor_cache.plan(
            setting_bytes,
            req.cache_type,
            req.dp,
            shm_extra_bytes=req.release.shm_extra_bytes,
            shm_max_object_mb=req.shm_max_object_mb,
        ).host_bytes
        recommendation = {
            "bytes": setting_bytes,
            "setting": f"--mm-processor-cache-gb {text}",
            "cost": {"host_bytes": host, "hits": run(setting_bytes)[0]},
        }
    at = replay(pc.cache_bytes) if pc.layout != "disabled" else None
    notes = [
        f"replayed with vLLM {req.release.version}'s rules ({pc.layout}); assumed: {_assumed(layout, api)}",
        f"items sized as vLLM {req.release.version} processes them: {proc.why} "
        f"({req.release.at['mm_device_do_normalize']})",
        "each curve point is exact: one pass where no request's images outweigh the cache, a replay below "
        "that (an item larger than the cache is never cached, so hits need not grow with the size); the "
        "recommendation is the smallest grid point reaching the target, lowered by bisection within its gap",
    ]
    if at is not None and at.failed:
        notes.append(
            f"{len(at.failed)} request(s) fail in vLLM at this size (a request evicting the items it found "
            "cached): raise --mm-processor-cache-gb above a request's largest total"
        )
    return {
        "name": "processor",
        "engine": "vllm",
        "size_bytes": pc.cache_bytes if at is not None else 0,
        "size_origin": "--mm-processor-cache-gb" if req.cache_gb is not None else "vLLM's default (4 GiB)",
        "lookups": at.total_lookups if at is not None else traffic.images,
        "hits": at.total_hits if at is not None else 0,
        "work_saved": at.saved if at is not None else 0,
        "work_unit": "processed bytes",
        "unbounded_hits": unbounded_hits,
        "unbounded_work_saved": unbounded_saved,
        "unbounded_bytes": everything,
        "curve": [{"size_bytes": c, "hits": h, "work_saved": w} for c, h, w in curve],
        "curve_method": REPLAYED,
        "target_hits_percent": str(target),
        "meets_target": at is not None and at.total_hits >= need,
        "recommended_bytes": None if recommendation is None else recommendation["bytes"],
        "recommended_setting": None if recommendation is None else recommendation["setting"],
        "recommended_cost": None if recommendation is None else recommendation["cost"],
        "notes": notes,
        "layout": pc.layout,
        "api_processes": pc.api_processes,
        "hits_per_api_process": at.hits if at is not None else [],
        "failed_requests": [
            {"request": i, "where": where, "keys": list(keys)} for i, where, keys in (at.failed if at else [])
        ],
        "host_bytes": pc.host_bytes,
        "pixel_dtype": proc.pixel_dtype,
    }


def _hits_needed(unbounded: int, target: Fraction) -> int:
    """``target`` percent of ``unbounded`` hits, rounded up."""
    need = Fraction(unbounded) * target / 100
    return -(-need.numerator // need.denominator)


def _assumed(layout: str, api: int) -> str:
    if layout == "shm":
        return "the workers read each request's items before the next request is processed"
    if api > 1:
        return f"requests dealt round robin over the {api} API processes (the kernel hands out connections)"
    if layout == "lru":
        return (
            "requests processed one at a time, in the log's order, each answered before the next (keys the "
            "engine core reports missing are dropped before the next request)"
        )
    return "requests processed one at a time, in the log's order"


def encoder_entry(
    req: VllmRequest,
    traffic: ImageTraffic,
    window: int,
    progress: Callable[[], None] | None = None,
    *,
    known: cache_items.TrafficItems | None = None,
) -> dict[str, Any]:
    """The encoder cache's entry of the ``caches`` list: bytes are tokens × the embedding's bytes per token
    (``known``: the items' ``traffic_items``, if made)."""
    plan = make_plan(req)
    enc = plan.encoder_cache
    tokens = (cache_items.traffic_items(req, traffic) if known is None else known).tokens
    budget = enc.get("budget_tokens")
    per_token = enc["embedding_bytes_per_token"]
    seen: dict[int, encoder_replay.EncoderReplay] = {}
    dense = encoder_replay.Dense.of(traffic.requests, tokens) if encoder_replay.FAST is not None else None

    def run(size: int) -> encoder_replay.EncoderReplay:
        if size not in seen:
            if progress is not None:
                progress()
            seen[size] = encoder_replay.replay(traffic.requests if dense is None else dense, tokens, size, window)
        return seen[size]

    biggest = max(tokens.values())
    total = sum(tokens.values())  # at this budget nothing is ever evicted, and nothing waits
    recommended = encoder_replay.no_wait_budget(traffic.requests, tokens, window, dense=dense)
    # from the no-wait budget up, one pass gives every budget; below it requests wait: replayed
    one_pass = encoder_replay.curve_without_wait(traffic.requests if dense is None else dense, tokens)

    def point(size: int) -> tuple[int, int, int]:
        """(hits, tokens saved, requests that waited) at ``size`` tokens, each exact."""
        if size >= recommended:
            return (*one_pass.at(size), 0)
        r = run(size)
        return r.hits, r.saved, len(r.waited)

    curve = [(c, *point(c)) for c in grid(biggest, total, CURVE_POINTS // 2)]
    unbounded_hits, unbounded_saved, _ = point(total)
    at = run(budget) if budget is not None else None
    step = max(1, len(at.occupancy) // MAX_OCCUPANCY_POINTS) if at else 1
    floor = enc.get("max_tokens_per_item")
    notes = [
        f"assumed: {encoder_replay.ASSUMED.format(window=window)}",
        "recommended: the smallest budget where no request waits for space (exact: no wait at one budget "
        "means the same admissions at every larger one)",
    ]
    return {
        "name": "encoder",
        "engine": "vllm",
        "size_bytes": None if budget is None else budget * per_token,
        "size_origin": "max(--max-num-batched-tokens, the largest item the launch allows)",
        "lookups": traffic.images,
        "hits": at.hits if at else 0,
        "work_saved": at.saved if at else 0,
        "work_unit": "encoder tokens",
        # the tokens the encoder computes at this budget: the items looked up less those the hits saved
        "encoder_tokens": sum(tokens[k] for r in traffic.requests for k in r) - (at.saved if at else 0),
        "unbounded_hits": unbounded_hits,
        "unbounded_work_saved": unbounded_saved,
        "unbounded_bytes": total * per_token,
        "curve": [
            {"size_bytes": c * per_token, "hits": h, "work_saved": w, "size_tokens": c, "waits": waits}
            for c, h, w, waits in curve
        ],
        "curve_method": REPLAYED,
        "target_hits_percent": None,
        "meets_target": at is not None and not at.waited and not at.refused,
        "recommended_bytes": recommended * per_token,
        "recommended_setting": _setting(recommended, floor),
        "recommended_cost": {"gpu_bytes_per_worker": max(recommended, floor or 0) * per_token},
        "notes": notes,
        "size_tokens": budget,
        "recommended_tokens": recommended,
        "floor_tokens": floor,
        "waited_requests": at.waited if at else [],
        "refused_requests": at.refused if at else [],
        "recomputed_tokens": at.recomputed if at else 0,
        "occupancy_peak_tokens": max(at.occupancy) if at else None,
        "occupancy_tokens": [max(at.occupancy[i : i + step]) for i in range(0, len(at.occupancy), step)] if at else [],
    }


def _setting(recommended: int, floor: int | None) -> str:
    """The flag that gives an encoder budget of ``recommended``: vLLM takes max(--max-num-batched-tokens,
    the largest item the launch allows) (``compute_mm_encoder_budget``)."""
    if floor is not None and recommended <= floor:
        return f"none: vLLM's budget is at least {floor:,} tokens here, the largest item the launch allows"
    return f"--max-num-batched-tokens {recommended}"


def check_launch(req: VllmRequest) -> None:
    """Refuse, in one line, a launch the vLLM plan finds an error in (e.g. a cache beyond the host's RAM)."""
    errors = [f for f in make_plan(req).findings if f.severity is Severity.error]
    if errors:
        more = f" (and {len(errors) - 1} more: see mmpool plan --engine vllm)" if len(errors) > 1 else ""
        raise CacheTrafficError(f"[{errors[0].code}] {errors[0].message}{more}")


def caches(
    req: VllmRequest,
    traffic: ImageTraffic,
    window: int = 1,
    progress: Callable[[], None] | None = None,
    target: Fraction = DEFAULT_TARGET,
    flags: vllm_prefix.PrefixFlags | None = None,
) -> list[dict[str, Any]]:
    """The ``caches`` list for vLLM: the processor cache, the encoder cache (behind the prefix cache: the items
    outside each cached prefix), then the prefix cache, where the traffic carries prompts.

    ``progress`` is called once per replay (the sizes one pass does not give). ``meets_target``: the processor cache
    gets ``target`` percent of the hits of one that never evicts; no request waits in the encoder cache.

    Raises:
        CacheTrafficError: the launch has an error (``check_launch``) or the model's items are unknown.
    """
    check_launch(req)
    known = cache_items.traffic_items(req, traffic)
    processor = processor_entry(req, traffic, progress, target, known=known)
    if not traffic.prompts:  # a trace: no prompts, every item reaches the encoder cache
        return [processor, encoder_entry(req, traffic, window, progress, known=known)]
    family, flags = (req.model.family.name if req.model else ""), flags or vllm_prefix.PrefixFlags()
    got = vllm_prefix.replay(traffic.requests, traffic.prompts, known.tokens, family, flags, target)
    encoder = encoder_entry(req, dataclasses.replace(traffic, requests=got.behind), window, progress, known=known)
    encoder["served_by_prefix"], encoder["notes"] = got.items_served, [*encoder["notes"], got.note]
    return [processor, encoder, got.entry]
