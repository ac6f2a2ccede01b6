"""vLLM's processor cache and encoder cache replayed over logged traffic: the ``caches`` list of ``mmpool cache``.

Each entry has the shape every engine's caches share: ``name``, ``engine``, ``size_bytes`` (the
deployment's), ``lookups``, ``hits``, ``curve`` (``[{size_bytes, hits}]``) and ``recommended_bytes``,
plus what is vLLM's own. Sizes come from the launch through the vLLM plan (``make_plan``: the same
layout, API processes and encoder budget ``plan --engine vllm`` prints); items from the traffic
(``cache_traffic``) and the model's processor (``cache_items``, Qwen-VL families).

- processor: exact replays (``processor_replay``) at the deployment's size and at the curve's sizes,
  a geometric grid from the smallest item to everything the traffic holds (vLLM's rules make the
  hits not monotone in the size, so each point is its own replay); ``recommended_bytes`` is the
  smallest of those sizes that gets the hits of a cache that never evicts, with the host RAM a
  launch at that size takes on the node (``processor_cache.plan``, the shm ring's handle secret and
  the render-only caches included).
- encoder: replays (``encoder_replay``) over token budgets; ``recommended_tokens`` is the smallest
  budget where no request waits (no wait at one budget means the same admissions at every larger
  one, so a bisection finds it exactly). Pure core: standard library only.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from mmpool_cli.core.findings import Severity
from mmpool_cli.engines.vllm import cache_items, encoder_replay, processor_cache, processor_replay
from mmpool_cli.engines.vllm import encoder_budget as eb
from mmpool_cli.engines.vllm.cache_traffic import CacheTrafficError, ImageTraffic
from mmpool_cli.engines.vllm.plan import make_plan
from mmpool_cli.engines.vllm.plan_encoder import qwen_vision
from mmpool_cli.engines.vllm.request import QWEN_VERSION, VllmRequest
from mmpool_cli.workload import qwen

CURVE_POINTS = 48
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


def _tokens(req: VllmRequest, traffic: ImageTraffic) -> tuple[eb.QwenVision, dict[str, int]]:
    vision = qwen_vision(req)
    if vision is None:
        name = req.model.name if req.model else "no model"
        raise CacheTrafficError(
            f"--model {name}: mmpool knows the processed items of {', '.join(sorted(QWEN_VERSION))} only; "
            "give one of them or a model directory of one"
        )
    tokens: dict[str, int] = {}
    for key, (w, h) in traffic.dims.items():
        try:
            tokens[key] = eb.image_tokens(vision, w, h)
        except qwen.ResizeError as e:
            raise CacheTrafficError(f"a {w}x{h} image: vLLM's processor refuses it ({e})") from None
    return vision, tokens


def processor_entry(
    req: VllmRequest, traffic: ImageTraffic, progress: Callable[[], None] | None = None
) -> dict[str, Any]:
    """The processor cache's entry of the ``caches`` list."""
    plan = make_plan(req)
    pc = plan.processor_cache
    vision, tokens = _tokens(req, traffic)
    layout: processor_replay.Layout = "processor_only"
    if pc.layout in ("lru", "shm"):
        layout = "shm" if pc.layout == "shm" else "lru"
    size_of = cache_items.shm_object_bytes if layout == "shm" else cache_items.item_size
    sizes = {k: size_of(vision, n) for k, n in tokens.items()}
    max_object = pc.shm_max_object_bytes or req.shm_max_object_mb << 20
    api = max(1, pc.api_processes) if layout == "processor_only" else 1

    def run(capacity: int) -> processor_replay.ReplayResult:
        if progress is not None:
            progress()
        return processor_replay.replay(
            traffic.requests, sizes, capacity, layout, api_processes=api, max_object=max_object
        )

    everything = sum(sizes.values()) * (2 if layout == "shm" else 1)  # a ring may need twice: wrap-around gaps
    points = grid(min(sizes.values()), everything)
    curve = [(c, run(c)) for c in points]
    best = curve[-1][1].total_hits
    recommended = next(c for c, r in curve if r.total_hits >= best)
    at = run(pc.cache_bytes) if pc.layout != "disabled" else None
    host = processor_cache.plan(
        recommended,
        req.cache_type,
        req.dp,
        shm_extra_bytes=req.release.shm_extra_bytes,
        shm_max_object_mb=req.shm_max_object_mb,
    ).host_bytes
    return {
        "name": "processor",
        "engine": "vllm",
        "size_bytes": pc.cache_bytes if at is not None else 0,
        "lookups": at.total_lookups if at is not None else 0,
        "hits": at.total_hits if at is not None else 0,
        "curve": [{"size_bytes": c, "hits": r.total_hits} for c, r in curve],
        "recommended_bytes": recommended,
        "layout": pc.layout,
        "api_processes": pc.api_processes,
        "hits_per_api_process": at.hits if at is not None else [],
        "failed_requests": [
            {"request": i, "where": where, "keys": list(keys)} for i, where, keys in (at.failed if at else [])
        ],
        "host_bytes": pc.host_bytes,
        "recommended_host_bytes": host,
        "assumed": _assumed(layout, api),
    }


def _assumed(layout: str, api: int) -> str:
    if layout == "shm":
        return "the workers read each request's items before the next request is processed"
    if api > 1:
        return f"requests dealt round robin over the {api} API processes (the kernel hands out connections)"
    return "requests processed one at a time, in the log's order"


def encoder_entry(
    req: VllmRequest, traffic: ImageTraffic, window: int, progress: Callable[[], None] | None = None
) -> dict[str, Any]:
    """The encoder cache's entry of the ``caches`` list: tokens, with bytes where the model gives them."""
    plan = make_plan(req)
    enc = plan.encoder_cache
    _, tokens = _tokens(req, traffic)
    budget = enc.get("budget_tokens")
    per_token = enc.get("embedding_bytes_per_token")

    def run(size: int) -> encoder_replay.EncoderReplay:
        if progress is not None:
            progress()
        return encoder_replay.replay(traffic.requests, tokens, size, window)

    biggest = max(tokens.values())
    total = sum(tokens.values())
    lo, hi = biggest, total  # at the sum of every item nothing ever waits
    while lo < hi:
        mid = (lo + hi) // 2
        probe = run(mid)
        if probe.waited or probe.refused:
            lo = mid + 1
        else:
            hi = mid
    recommended = lo
    curve = [(c, run(c)) for c in grid(biggest, total, CURVE_POINTS // 2)]
    at = run(budget) if budget is not None else None
    lookups = traffic.images
    step = max(1, len(at.occupancy) // MAX_OCCUPANCY_POINTS) if at else 1
    return {
        "name": "encoder",
        "engine": "vllm",
        "size_bytes": budget * per_token if budget is not None and per_token else None,
        "lookups": lookups,
        "hits": _hits(at) if at else 0,
        "curve": [
            {
                "size_tokens": c,
                "size_bytes": c * per_token if per_token else None,
                "hits": _hits(r),
                "waits": len(r.waited),
            }
            for c, r in curve
        ],
        "recommended_bytes": recommended * per_token if per_token else None,
        "size_tokens": budget,
        "recommended_tokens": recommended,
        "floor_tokens": enc.get("max_tokens_per_item"),
        "setting": _setting(recommended, enc.get("max_tokens_per_item")),
        "waited_requests": at.waited if at else [],
        "refused_requests": at.refused if at else [],
        "recomputed_tokens": at.recomputed if at else 0,
        "occupancy_peak_tokens": max(at.occupancy) if at else None,
        "occupancy_tokens": [max(at.occupancy[i : i + step]) for i in range(0, len(at.occupancy), step)] if at else [],
        "assumed": encoder_replay.ASSUMED.format(window=window),
    }


def _setting(recommended: int, floor: int | None) -> str:
    """The flag that gives an encoder budget of ``recommended``: vLLM takes max(--max-num-batched-tokens,
    the largest item the launch allows) (``compute_mm_encoder_budget``)."""
    if floor is not None and recommended <= floor:
        return f"none: vLLM's budget is at least {floor:,} tokens here, the largest item the launch allows"
    return f"--max-num-batched-tokens {recommended}"


def _hits(r: encoder_replay.EncoderReplay) -> int:
    return sum(1 for e in r.log if e[0] in ("hit", "dup"))


def check_launch(req: VllmRequest) -> None:
    """Refuse, in one line, a launch the vLLM plan finds an error in (e.g. a cache beyond the host's RAM)."""
    errors = [f for f in make_plan(req).findings if f.severity is Severity.error]
    if errors:
        more = f" (and {len(errors) - 1} more: see mmpool plan --engine vllm)" if len(errors) > 1 else ""
        raise CacheTrafficError(f"[{errors[0].code}] {errors[0].message}{more}")


def caches(
    req: VllmRequest, traffic: ImageTraffic, window: int = 1, progress: Callable[[], None] | None = None
) -> list[dict[str, Any]]:
    """The ``caches`` list for vLLM: the processor cache, then the encoder cache.

    ``progress`` is called once per replay (about a hundred).

    Raises:
        CacheTrafficError: the launch has an error (``check_launch``) or the model's items are unknown.
    """
    check_launch(req)
    return [processor_entry(req, traffic, progress), encoder_entry(req, traffic, window, progress)]
