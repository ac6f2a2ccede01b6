"""The parts of a plan that differ between SGLang releases: split, consumers, KV reservation, device.

Parts of ``make_plan``; each takes the release (``sglang.versions.Release``) whose rules apply.
Pure core: standard library only.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from mmpool_cli.core.findings import Severity
from mmpool_cli.core.units import MiB, format_size
from mmpool_cli.engines.sglang import rules as sg
from mmpool_cli.engines.sglang.models import Budget, HbmEstimate, PlanRequest
from mmpool_cli.engines.sglang.versions import Release, first_with

# How a part of make_plan reports: severity, code, message, subject.
Add = Callable[[Severity, str, str, str | None], None]


def smallest(rel: Release, workers: int, transport: str, consumers: int, granularity: int) -> int:
    """The smallest ``SGLANG_MM_FEATURE_CACHE_MB`` the release accepts for this layout."""
    # Before 0.5.18 the pool has no header: any budget of 1 MiB or more makes one.
    if not rel.stream_ordered and transport == "cuda_ipc":
        return 1
    return rel.smallest_valid_budget_mb(workers, transport, consumers, granularity)


def release_budget(budget: Budget, rel: Release) -> Budget:
    """``budget`` with SGLang's default taken from ``rel`` where the default applies (unset or unparsable)."""
    if budget.source == "default" or budget.invalid:
        return replace(budget, bytes=rel.default_budget_bytes)
    return budget


def transport_known(rel: Release, transport: str, add: Add) -> bool:
    """Whether the release has ``transport``; an error finding when it does not."""
    if transport in rel.pool_transports:
        return True
    add(
        Severity.error,
        "transport-not-in-release",
        f"SGLang {rel.version} has no {transport} transport (it has {', '.join(rel.transports)}); "
        "use cuda_ipc or pick the release you run with --sglang-version",
        "transport",
    )
    return False


def consumer_sizes(request: PlanRequest, rel: Release, add: Add) -> tuple[int, int, int] | None:
    """``(tp, dp, attn_dp)`` that set C: from 0.5.22 C is ``tp // (dp * attn_dp)`` under attention DP,
    before that ``tp`` (every TP rank reads each feature), so attention DP is left out."""
    if rel.attn_dp_consumers:
        dp_size, attn_dp_size = sg.resolve_attention_dp(
            request.dp_size, request.attn_dp_size, request.enable_dp_attention
        )
        return request.tp_size, dp_size, attn_dp_size
    if request.attn_dp_size != 1 and not rel.has("--attn-dp-size"):
        add(
            Severity.error,
            "flag-not-in-release",
            f"SGLang {rel.version} has no --attn-dp-size (it is new in {first_with('--attn-dp-size')}); "
            "write --dp-size N --enable-dp-attention",
            "attn_dp_size",
        )
        return None
    return request.tp_size, request.dp_size, 1


def split_findings(rel: Release, effective: int, workers: int, per_worker: int, unused: int, add: Add) -> None:
    """What the release's split does with the budget: no split, the 128 MiB floor, a remainder."""
    total = per_worker * workers
    if rel.split == "none":
        add(
            Severity.warning if workers > 1 else Severity.info,
            "no-split",
            f"SGLang {rel.version} does not split the budget: each of the {workers} tokenizer worker(s) "
            f"allocates the whole {format_size(effective)}, {format_size(total)} in all",
            "budget",
        )
    elif rel.split == "floor" and total > effective:
        add(
            Severity.warning,
            "split-floor",
            f"SGLang {rel.version} gives each worker max(budget // workers, {rel.floor_bytes // MiB} MiB): "
            f"the {workers} pools take "
            f"{format_size(total)}, {format_size(total - effective)} more than the budget",
            "budget",
        )
    if unused:
        add(
            Severity.info,
            "split-remainder",
            f"{effective:,} bytes do not split evenly across {workers} workers: {unused} byte(s) stay unused",
            "budget",
        )


def _vlm_cache(request: PlanRequest, rel: Release, mb: int) -> str:
    """How the reservation's second term reads (kv_cache_configurator.py:210 adds the two as they are)."""
    vlm = request.vlm_cache
    if vlm is None:
        return f"{rel.default_vlm_cache_mb} MiB unless set"
    if vlm.invalid:
        return f"{rel.default_vlm_cache_mb} MiB: its default, the value is not an integer"
    return f"{vlm.mb} MiB: {mb + vlm.mb} MiB in all"


def release_findings(request: PlanRequest, rel: Release, mb: int, hbm: HbmEstimate, add: Add) -> None:
    """What the release reserves from the KV cache, and where its pools live."""
    if request.transport in rel.kv_reserves:
        add(
            Severity.info,
            "kv-reservation",
            f"for a multimodal model SGLang {rel.version} takes {sg.ENV_BUDGET} ({mb} MiB) plus "
            f"{sg.ENV_VLM_CACHE} ({_vlm_cache(request, rel, mb)}) out of the KV-cache budget "
            f"on every rank; the tokenizer processes' CUDA contexts and allocator rounding on GPU "
            f"{hbm.base_gpu_id} are not in that reservation",
            None,  # about the model's KV cache, not one setting
        )
    else:
        add(
            Severity.warning,
            "kv-not-reserved",
            f"SGLang {rel.version} does not take the pools out of the KV-cache budget: their "
            f"{format_size(hbm.pool_reserved_bytes)} on GPU {hbm.base_gpu_id} must fit in what "
            "--mem-fraction-static leaves free; lower it if the launch runs out of memory",
            None,
        )
    if not rel.on_base_gpu and request.base_gpu_id:
        add(
            Severity.warning,
            "pool-on-current-device",
            f"SGLang {rel.version} allocates the pools on each tokenizer process's current CUDA device "
            f"(GPU 0 of CUDA_VISIBLE_DEVICES), not on --base-gpu-id {request.base_gpu_id}",
            "base_gpu_id",
        )
