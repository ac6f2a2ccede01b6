"""What the plan says about a workload and its KV cost: the findings, and the KV figure at the plan's layout.

Pure core: standard library only.
"""

from __future__ import annotations

from mmpool_cli.core.findings import Finding, Severity
from mmpool_cli.core.units import format_size
from mmpool_cli.engines.sglang import rules as sg
from mmpool_cli.engines.sglang import versions
from mmpool_cli.engines.sglang.versions import Release
from mmpool_cli.workload.families import FAMILIES
from mmpool_cli.workload.features import Workload
from mmpool_cli.workload.kv import KvCost, KvRequest, kv_cost


def workload_findings(
    workload: Workload, budget_mb: int, base_gpu_id: int, slice_bytes: int, release: str = versions.TEXTS_FROM
) -> list[Finding]:
    """What one request of the workload does to the pool, or why the pool is pure cost for this model.

    ``slice_bytes`` is what the request's tensors take in the pool at the plan's transport. The
    family table was read from SGLang ``versions.TEXTS_FROM``; for another ``release`` the findings say so.
    """
    who = f"SGLang {versions.TEXTS_FROM}"
    if release != versions.TEXTS_FROM:
        who += f" (the release mmpool's family table is read from; {release} is assumed alike)"
    fam = FAMILIES[workload.family]
    if not workload.pooled:
        moved = sum(t.bytes for t in workload.unpooled)
        outside = f"; one request moves {format_size(moved)} of features outside it" if moved else ""
        return [
            Finding(
                Severity.warning,
                "model-not-pooled",
                f"{fam.title} ({workload.model}): {who} never puts its features in the pool "
                f"({fam.note}), so the {budget_mb} MiB pool on GPU {base_gpu_id} is pure cost{outside}: launch "
                "with --mm-feature-transport cpu",
                subject="workload",
            )
        ]
    if not workload.tensors:
        return []
    return [
        Finding(
            Severity.info,
            "workload-request",
            f"one request ({', '.join(workload.items)}) puts {len(workload.tensors)} tensor(s) of "
            f"{format_size(workload.request_bytes)} in the pool, {slice_bytes:,} bytes in its slices "
            f"({fam.title}: {fam.note})",
            subject="workload",
        )
    ]


def plan_kv_cost(
    request: KvRequest, attn_tp: int, budget_mb: int, landing_extra_bytes: int | None, rel: Release
) -> tuple[KvCost, list[Finding]]:
    """The KV cost at the plan's layout and budget, with the findings that explain it."""
    findings: list[Finding] = []
    # an unusable SGLANG_VLM_CACHE_SIZE_MB is the plan's finding (env_vars.vlm_cache_findings), for every command
    cost = kv_cost(
        request.model,
        attn_tp=max(1, attn_tp),
        kv_cache_dtype=request.kv_cache_dtype,
        page_size=request.page_size,
        budget_mb=budget_mb,
        vlm_cache_mb=request.vlm_cache_mb,
        landing_extra_bytes=landing_extra_bytes,
    )
    tokens = f"{cost.tokens_min:,}"
    if cost.tokens_max != cost.tokens_min:
        tokens += f"-{cost.tokens_max:,}"
    message = (
        f"{sg.ENV_BUDGET} ({budget_mb} MiB) + {sg.ENV_VLM_CACHE} ({request.vlm_cache_mb} MiB) come out of the KV "
        f"cache on every rank: {tokens} tokens of max_total_num_tokens at {cost.cell_bytes:,} bytes per token per rank"
    )
    if cost.landing_tokens_max is not None:
        message += (
            f"; up to {cost.landing_tokens_max:,} if the tokenizer's pool and CUDA context land on the GPU while "
            "SGLang measures memory for the KV cache"
        )
    if cost.approximate:
        message += f" (approximate: {cost.approximate_reason})"
    findings.append(Finding(Severity.info, "kv-cost", message, subject="kv"))
    if request.qwen3_vl and request.vlm_cache_variable is None:
        findings.append(
            Finding(
                Severity.info,
                "qwen3-vl-vlm-cache",
                f"on SM 9.0 GPUs with 60 GiB or more SGLang sets {sg.ENV_VLM_CACHE}=0 for Qwen3-VL when it is "
                f"unset, which lowers the KV cost by {rel.default_vlm_cache_mb} MiB per rank",
                subject="env",
            )
        )
    return cost, findings
