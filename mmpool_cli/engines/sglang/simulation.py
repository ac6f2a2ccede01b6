"""What ``mmpool simulate`` needs of SGLang: which releases it can replay, their pool rules, the recycler.

The simulator itself (``mmpool_cli.pools``) knows no engine; this module reads the chosen
release's record and SGLang's environment into the neutral ``PoolRules`` and interval it takes.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import replace
from fractions import Fraction

from mmpool_cli.core.bounds import LARGEST_GPU_HBM_BYTES, MAX_WORKERS
from mmpool_cli.core.findings import Finding, Severity
from mmpool_cli.core.units import NS_PER_S, MiB
from mmpool_cli.engines.sglang import rules as sg
from mmpool_cli.engines.sglang import versions
from mmpool_cli.engines.sglang.env_vars import env_findings, recycle_from_env
from mmpool_cli.engines.sglang.models import Plan, PlanRequest
from mmpool_cli.engines.sglang.versions import Release
from mmpool_cli.errors import MmpoolError
from mmpool_cli.pools.allocator import PoolRules
from mmpool_cli.pools.replay import PoolLayout
from mmpool_cli.pools.report import PoolSetup


def refusal(rel: Release, transport: str) -> str | None:
    """Why ``rel`` with ``transport`` cannot be simulated (a usage error), or None when it can."""
    if transport not in ("cuda_ipc", "cuda_vmm"):
        return f"simulate models cuda_ipc and cuda_vmm, not {transport}"
    if not rel.stream_ordered:
        stream_ordered = [v for v in versions.known() if versions.release(v).stream_ordered]
        first, last = stream_ordered[0], versions.known()[-1]
        return (
            f"simulate models the stream-ordered pool of SGLang {first} and later (its allocator is the same "
            f"through {last}); SGLang {rel.version} has the older shm-counter pool: pick "
            f"--sglang-version {first} or later"
        )
    return None


def pool_rules(rel: Release) -> PoolRules:
    """The cuda_ipc allocator's rules in ``rel`` (a stream-ordered release: ``refusal`` is None)."""
    assert rel.max_inflight_slices is not None, "only a stream-ordered pool is simulated"
    return PoolRules("cuda_ipc", rel.data_alignment, rel.max_inflight_slices)


def recycle_interval_ns(environ: Mapping[str, str]) -> tuple[int, str]:
    """The recycler's interval in whole nanoseconds, read as SGLang reads it, and where it came from.

    A value Python's ``float()`` rejects falls back to SGLang's 0.05 s (SGLang only warns); one
    SGLang refuses or cannot run with (not positive, NaN, too large to wait on) is a usage error.
    """
    recycle = recycle_from_env(environ)
    seconds = recycle.seconds
    if recycle.variable is None or recycle.invalid:
        source = "default"
    else:
        source = f"{recycle.variable}={recycle.raw}"
        if math.isnan(seconds) or not 0 < seconds <= sg.MAX_WAIT_SEC:
            # what SGLang does with it, in the words 'mmpool check' uses for the same variable
            said = [f.message for f in env_findings(environ) if f.code.startswith("env-recycle-")]
            raise MmpoolError(said[0] if said else f"{source}: set a positive number of seconds, e.g. 0.05")
    ns = round(Fraction(seconds) * NS_PER_S)
    if ns <= 0:
        raise MmpoolError(f"{source}: the interval is under a nanosecond; set e.g. 0.05")
    return ns, source


def setup(request: PlanRequest, plan: Plan, environ: Mapping[str, str]) -> PoolSetup:
    """The pools of ``plan`` for the simulator; a layout SGLang refuses (no consumers) is a usage error.

    The findings are the plan's and the environment's; a budget with an error finding is refused
    (not simulated), and the budgets to search are those the plan accepts for this layout.
    """
    if plan.consumers is None or request.workers < 1:  # a layout SGLang refuses: nothing to simulate
        raise MmpoolError(_first_error(plan) or "the parallel layout has no consumers")
    if request.workers > MAX_WORKERS:
        raise MmpoolError(f"--workers {request.workers}: simulate handles at most {MAX_WORKERS} tokenizer workers")
    rel = versions.release(request.sglang_version)
    consumers = plan.consumers
    vmm = request.transport == "cuda_vmm"
    header = 0 if vmm else rel.header_bytes(consumers)
    recycle_ns, recycle_source = recycle_interval_ns(environ)
    findings = _unique(plan.findings + env_findings(environ))
    errors = [f.message for f in findings if f.severity is Severity.error]
    refused = None
    if plan.allocation_bytes_per_worker is None or (not vmm and (plan.per_worker_bytes or 0) <= header) or errors:
        refused = (errors[0] if errors else None) or _first_error(plan) or "SGLang refuses this budget"
    workers = request.workers
    if vmm:
        from mmpool_cli.pools.cuda_vmm import vmm_layout

        control, granularity = rel.vmm_lease_control_bytes(consumers), request.vmm_granularity

        def layouts(mb: int) -> PoolLayout:
            return vmm_layout(workers, mb * MiB // workers, granularity, control, recycle_ns, sg.VMM_CONTROL_ALIGNMENT)

    else:
        rules = pool_rules(rel)

        def layouts(mb: int) -> PoolLayout:
            return PoolLayout(workers, mb * MiB // workers, header, recycle_ns, rules)

    lowest = rel.smallest_valid_budget_mb(workers, request.transport, consumers, request.vmm_granularity)
    highest, refused_every = _largest_planned_mb(request, lowest)
    return PoolSetup(
        workers=workers,
        per_worker_bytes=None if refused else plan.per_worker_bytes,
        header_bytes=header,
        consumers=consumers,
        tp_size=request.tp_size,
        rules=layouts(max(lowest, 1)).rules,
        recycle_ns=recycle_ns,
        recycle_source=recycle_source,
        budget_bytes=plan.budget_bytes,
        budget_mb=plan.sglang_mm_feature_cache_mb,
        refused=refused,
        version=request.sglang_version,
        chosen=request.sglang_version_chosen,
        findings=findings,
        layouts=layouts,
        lowest_mb=lowest,
        highest_mb=highest,
        header_for=None if vmm else rel.header_bytes,
        refused_every=refused_every,
    )


def _largest_planned_mb(request: PlanRequest, lowest: int) -> tuple[int, str | None]:
    """The largest whole-MiB budget the plan accepts for this layout (no error finding); below lowest
    where it accepts none, with its reason at lowest (1,024 workers' CUDA contexts fit no GPU, say)."""
    from mmpool_cli.engines.sglang.models import Budget
    from mmpool_cli.engines.sglang.plan import make_plan

    def plan_at(mb: int) -> Plan:
        budget = Budget(bytes=mb * MiB, source="flag")
        return make_plan(replace(request, budget=budget, feature_sizes=(), workload=None, kv=None))

    def accepted(mb: int) -> bool:
        return plan_at(mb).status == "ok"

    if lowest >= 1 and not accepted(lowest):  # a budget more can only need more: none is accepted
        return lowest - 1, _first_error(plan_at(lowest)) or "SGLang refuses this budget"
    lo, hi = lowest - 1, LARGEST_GPU_HBM_BYTES // MiB
    if accepted(hi):
        return hi, None
    while hi - lo > 1:  # lo accepted (or below the range), hi refused
        mid = (lo + hi) // 2
        if accepted(mid):
            lo = mid
        else:
            hi = mid
    return lo, None


def _unique(findings: list[Finding]) -> list[Finding]:
    seen: set[tuple[str, str]] = set()
    out = []
    for f in findings:
        if (f.code, f.message) not in seen:
            seen.add((f.code, f.message))
            out.append(f)
    return out


def _first_error(plan: Plan) -> str | None:
    return next((f.message for f in plan.findings if f.severity is Severity.error), None)
