"""``mmpool tune --engine vllm``: the request vLLM's tune is given, read as ``mmpool cache --engine vllm`` reads it.

The bodies are read by ``engines.vllm.cache_traffic`` (the same reader, so the same requests, keys and
prompts), the launch is the plan request ``cache`` builds from vLLM's flags, the prefix flags and the
encoder window are ``cache``'s; the videos of the bodies are measured for the GPU decode pool. No typer,
rich or torch.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from mmpool_cli.caches.report import CacheItem
from mmpool_cli.engines import engine
from mmpool_cli.engines.vllm import cache_items, cache_traffic
from mmpool_cli.engines.vllm.prefix import PrefixFlags
from mmpool_cli.engines.vllm.request import VllmRequest
from mmpool_cli.engines.vllm.tune import VllmTuneInput, measure_videos, unsized_videos
from mmpool_cli.errors import MmpoolError
from mmpool_cli.inputs.traffic.cache_request import CacheRequest, ModelShape
from mmpool_cli.inputs.traffic.tune_request import DEFAULT_POINTS, TuneRequest
from mmpool_cli.tune.split import Row, TuneReport
from mmpool_cli.usecases.cache_vllm import check_window


def tune_request(
    files: Sequence[str],
    request: VllmRequest,
    flags: PrefixFlags,
    *,
    assume_image: tuple[int, int] | None = None,
    window: int = 1,
    budget_bytes: int | None = None,
    budget_text: str | None = None,
    objective: str = "no-fallback",
    points: int = DEFAULT_POINTS,
    environ: Mapping[str, str] | None = None,
) -> TuneRequest:
    """vLLM's ``TuneRequest``: its launch and traffic in ``pools`` (``VllmTuneInput``), and in ``cache`` the
    traffic's images as the processor cache sizes them (vLLM's ``cache`` takes no ``CacheRequest`` of its own).

    Raises:
        MmpoolError: no body log, a window out of bounds, traffic ``cache --engine vllm`` refuses, no model.
    """
    if not files:
        raise MmpoolError("give the traffic: --from FILE (OpenAI chat-completions bodies; repeat)")
    if request.model is None:
        raise MmpoolError("--model DIR is needed: the model's processor sizes the items, its config the KV cache")
    check_window(window)
    traffic = cache_traffic.read(files, assume_image)
    videos, unsized = measure_videos(traffic.videos)
    inp = VllmTuneInput(request, traffic, flags, window, videos, unsized)
    processed = cache_items.traffic_items(request, traffic).processed
    source = ", ".join(traffic.files)
    items = [CacheItem(str(n), "image", k, processed[k], k) for n, keys in enumerate(traffic.requests) for k in keys]
    cache = CacheRequest(
        request.model.family, dict(request.model.settings), items, source, ModelShape(None), dict(environ or {})
    )
    return TuneRequest(
        cache=cache,
        pools=inp,
        budget_bytes=budget_bytes,
        budget_text=budget_text,
        objective=objective,
        points=points,
        environ=dict(environ or {}),
        source=source,
    )


def tune(request: TuneRequest) -> TuneReport:
    """Every split of vLLM's GPU memories scored (``Engine.tune``)."""
    return engine("vllm").tune(request)


def tune_at(request: TuneRequest, values: dict[str, int] | None = None) -> Row:
    """One split's row, scored as ``tune`` scores its rows (``Engine.tune_at``; None: the launch's own)."""
    return engine("vllm").tune_at(request, values)


def video_warnings(request: TuneRequest) -> list[str]:
    """Why a video of the traffic is not in the decode pool's count, as ``tune`` warns of it."""
    if not isinstance(request.pools, VllmTuneInput):
        raise MmpoolError("mmpool tune --engine vllm: the request carries no vLLM launch and traffic")
    return unsized_videos(request.pools)
