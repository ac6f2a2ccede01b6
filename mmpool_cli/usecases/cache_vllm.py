"""``mmpool cache --engine vllm``: vLLM's processor and encoder caches replayed over logged traffic.

Reads the OpenAI bodies (``engines.vllm.cache_traffic``), checks the launch through the vLLM plan
and returns the report: the traffic read and the ``caches`` list (``engines.vllm.caches``). No
typer, rich or torch.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from fractions import Fraction
from typing import Any

from mmpool_cli.engines.vllm import cache_traffic, caches
from mmpool_cli.engines.vllm.prefix import PrefixFlags
from mmpool_cli.engines.vllm.request import VllmRequest
from mmpool_cli.errors import MmpoolError

SCHEMA_VERSION = 1
MAX_WINDOW = 4096


def check_window(window: int) -> None:
    """``MmpoolError`` for an ``--encoder-window`` out of bounds (the same bound for traffic and recordings)."""
    if not 1 <= window <= MAX_WINDOW:
        raise MmpoolError(f"--encoder-window {window}: give 1 to {MAX_WINDOW} requests holding encoder entries at once")


def vllm_caches(
    files: Sequence[str],
    request: VllmRequest,
    *,
    assume_image: tuple[int, int] | None = None,
    window: int = 1,
    progress: Callable[[], None] | None = None,
    trace: tuple[str, Iterable[tuple[str, str, str | None, int]]] | None = None,
    target: Fraction = caches.DEFAULT_TARGET,
    flags: PrefixFlags | None = None,
) -> dict[str, Any]:
    """The report of ``mmpool cache --engine vllm`` for the body logs ``files``, or for ``trace``: a trace
    file's name and its items ``(request, kind, key, pixel bytes)`` (what ``mmpool trace`` wrote).

    Raises:
        MmpoolError: no input, a window out of bounds, traffic that cannot be replayed, a launch error.
    """
    if bool(files) == (trace is not None):
        raise MmpoolError(
            "give the traffic: --from FILE (OpenAI chat-completions bodies) or --trace FILE, one of the two"
        )
    check_window(window)
    if trace is not None:
        traffic = cache_traffic.from_items(trace[1], trace[0])
    else:
        traffic = cache_traffic.read(files, assume_image)
    entries = caches.caches(request, traffic, window, progress, target, flags)
    # the prefix cache's findings (what its replay assumed, or its check against the server) go with the report's
    findings = [f for entry in entries for f in entry.pop("findings", [])]
    # the top level of SGLang's ``mmpool cache`` report (render.caches), then vLLM's own fields
    return {
        "schema_version": SCHEMA_VERSION,
        "status": "ok" if all(c["meets_target"] for c in entries) else "fail",
        "engine": f"vLLM {request.release.version}",
        "source": ", ".join(traffic.files),
        "caches": entries,
        "findings": findings,  # what the processor and encoder replays assume is in their notes
        "vllm_version": request.release.version,
        "model": request.model.name if request.model else None,
        "traffic": {
            "files": traffic.files,
            "bodies": traffic.bodies,
            "requests_with_images": len(traffic.requests),
            "images": traffic.images,
            "distinct_images": traffic.distinct,
            "not_replayed": dict(traffic.not_replayed),
        },
    }
