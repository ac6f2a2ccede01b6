"""What an mmpool config's plan alone does not say: transport limits, the GPU's room, the environment's budget.

Each finding is located at the config's key. Pure core: no typer, rich or torch.
"""

from __future__ import annotations

from typing import Any

from mmpool_cli.core.excerpt import shorten
from mmpool_cli.core.findings import Finding, Severity
from mmpool_cli.core.units import format_size
from mmpool_cli.engines.sglang import rules as sg
from mmpool_cli.engines.sglang import versions
from mmpool_cli.engines.sglang.env_vars import LaunchEnv
from mmpool_cli.engines.sglang.models import Plan
from mmpool_cli.inputs.yamlsrc import Source


def extra_findings(src: Source, cfg: Any, plan: Plan | None, launch: LaunchEnv) -> list[Finding]:
    """What the plan alone does not say: transport limits, the GPU's room, the environment's budget."""
    findings: list[Finding] = []
    where_transport = src.where(("pool", "transport"))
    for message in sg.transport_errors(cfg.pool.transport, cfg.parallel.nnodes, cfg.parallel.pp):
        findings.append(
            Finding(Severity.error, "transport-layout", f"SGLang refuses this layout: '{message}'", where_transport)
        )
    env_budget = launch.budget
    if cfg.pool.size is not None and env_budget.source == "env":
        mb = None if env_budget.invalid else sg.budget_mb(env_budget.bytes)
        if mb != sg.budget_mb(cfg.pool.size):
            findings.append(
                Finding(
                    Severity.warning,
                    "config-size-env-differs",
                    f"the environment sets {env_budget.variable}={shorten(env_budget.raw or '')}, and SGLang "
                    "reads that, "
                    "not pool.size "
                    f"({sg.budget_mb(cfg.pool.size)} MiB); export {sg.ENV_BUDGET}={sg.budget_mb(cfg.pool.size)}",
                    src.where(("pool", "size")),
                )
            )
    if cfg.pool.size is not None and env_budget.source == "default" and plan is not None:
        # SGLang reads only the environment: an unset variable is its default, whatever pool.size says
        default_mb = versions.release(plan.sglang_version).default_budget_mb
        if sg.budget_mb(cfg.pool.size) != default_mb:
            findings.append(
                Finding(
                    Severity.warning,
                    "config-size-env-differs",
                    f"{sg.ENV_BUDGET} is not set, so SGLang reserves its default {default_mb} MiB, not pool.size "
                    f"({sg.budget_mb(cfg.pool.size)} MiB); export {sg.ENV_BUDGET}={sg.budget_mb(cfg.pool.size)}",
                    src.where(("pool", "size")),
                )
            )
    if plan is None or plan.hbm is None:
        return findings
    if plan.transport == "cuda_ipc" and launch.expandable_segments:
        findings.append(
            Finding(
                Severity.warning,
                "pidfd-getfd-needed",
                "with PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True, cuda_ipc moves memory between processes "
                "with pidfd_getfd, which needs ptrace rights; 'mmpool check' on the launch machine tests it",
                where_transport,
            )
        )
    total, free = cfg.gpu.total_hbm, cfg.gpu.free_hbm
    if total is not None and free is not None and free > total:
        findings.append(
            Finding(
                Severity.error,
                "gpu-free-exceeds-total",
                f"gpu.free_hbm {format_size(free)} is more than gpu.total_hbm {format_size(total)}",
                src.where(("gpu", "free_hbm")),
            )
        )
    elif free is not None and plan.hbm.max_total_bytes > free:
        # the larger figure: under cuda_vmm the positional-embeds pools may come on top
        findings.append(
            Finding(
                Severity.error,
                "hbm-exceeds-free",
                f"the pools and tokenizer contexts take {'up to ' if plan.hbm.positional_pool_bytes else ''}"
                f"{format_size(plan.hbm.max_total_bytes)} on GPU "
                f"{plan.hbm.base_gpu_id}, more than its {format_size(free)} free; lower pool.size or "
                "pool.tokenizer_workers",
                src.where(("gpu", "free_hbm")),
            )
        )
    elif total:
        share = plan.hbm.max_total_bytes * 1000 // total
        findings.append(
            Finding(
                Severity.info,
                "hbm-share",
                f"the pools and tokenizer contexts take {'up to ' if plan.hbm.positional_pool_bytes else ''}"
                f"{format_size(plan.hbm.max_total_bytes)}, "
                f"{share // 10}.{share % 10}% of GPU {plan.hbm.base_gpu_id}'s {format_size(total)}",
                src.where(("gpu", "total_hbm")),
            )
        )
    return findings
