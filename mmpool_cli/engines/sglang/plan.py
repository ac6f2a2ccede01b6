"""The plan: what one SGLang release will do with a pool configuration, as integer arithmetic.

The release comes with the request (``PlanRequest.sglang_version``, the newest by default); its
rules (``sglang.versions``) decide the split, the header, the alignment, the consumers, the
transports it has and what the KV cache reserves.

Pure core: no I/O, no typer, rich or torch. ``make_plan`` never raises for a bad
configuration: every problem SGLang would hit becomes an error finding in the plan.
"""

from __future__ import annotations

from mmpool_cli.core.excerpt import shorten
from mmpool_cli.core.findings import Finding, Severity
from mmpool_cli.core.reports import Settings
from mmpool_cli.core.units import MiB, format_size
from mmpool_cli.engines.sglang import eras, versions
from mmpool_cli.engines.sglang import rules as sg
from mmpool_cli.engines.sglang.budget import check_budget
from mmpool_cli.engines.sglang.capacity import check_bounds, feature_fit, hbm_estimate
from mmpool_cli.engines.sglang.env_vars import vlm_cache_findings
from mmpool_cli.engines.sglang.eras import Add
from mmpool_cli.engines.sglang.models import Plan, PlanRequest
from mmpool_cli.engines.sglang.settings import sglang_flag
from mmpool_cli.engines.sglang.versions import Release
from mmpool_cli.engines.sglang.workload_findings import plan_kv_cost, workload_findings


def make_plan(request: PlanRequest) -> Plan:
    """Plan SGLang's pools for ``request``: split, header, usable bytes, capacity and HBM.

    Sizes are exact integers; the budget is floored to whole MiB as SGLang takes it, and
    split across the workers by the release's rule (from 0.5.16 ``effective // workers``,
    the remainder unused). An unknown ``request.sglang_version`` raises MmpoolError.
    """
    findings: list[Finding] = []

    def add(severity: Severity, code: str, message: str, subject: str | None) -> None:
        findings.append(Finding(severity, code, message, subject=subject))

    rel = versions.release(request.sglang_version)
    budget = eras.release_budget(request.budget, rel)
    mb = sg.budget_mb(budget.bytes)
    effective = mb * MiB
    floor_loss = budget.bytes - effective
    workers, transport = request.workers, request.transport

    if workers <= 0:
        add(
            Severity.error,
            "workers-not-positive",
            f"--tokenizer-worker-num {workers}: SGLang fails at start-up with "
            f"'{sg.MSG_WORKERS_NOT_POSITIVE}'; use 1 or more",
            "workers",
        )
    layout = eras.consumer_sizes(request, rel, add)
    consumers = None if layout is None else _consumers(*layout, add)
    smallest = eras.smallest(rel, max(workers, 1), transport, consumers or 1, request.vmm_granularity)
    check_budget(budget, mb, floor_loss, smallest, rel, add)
    if request.vlm_cache is not None:
        findings += vlm_cache_findings(request.vlm_cache)
    known_transport = eras.transport_known(rel, transport, add)
    if known_transport:
        _unasked_transport(request, rel, add)

    per_worker = unused = header = lease_control = allocation = usable = None
    if known_transport and workers > 0 and (mb > 0 or rel.split != "exact"):
        per_worker = rel.per_worker(effective, workers)
        unused = max(effective - per_worker * workers, 0) if rel.split != "none" else 0
        eras.split_findings(rel, effective, workers, per_worker, unused, add)
    if per_worker is not None and per_worker < 0:
        add(
            Severity.error,
            "budget-not-positive",
            f"{sg.ENV_BUDGET}={mb}: SGLang {rel.version} fails at start-up in torch.empty "
            "('Trying to create tensor with negative dimension'); use 1 or more",
            "env" if budget.source in ("env", "default") else "budget",
        )
        per_worker = unused = None
    if per_worker is not None and consumers is not None:
        if transport == "cuda_ipc":
            header, lease_control = rel.header_bytes(consumers), 0
            if rel.stream_ordered and per_worker <= header:
                need = rel.smallest_valid_budget_mb(workers, transport, consumers, 0)
                add(
                    Severity.error,
                    "pool-too-small",
                    f"each worker's {per_worker:,} bytes do not exceed the {header:,}-byte control "
                    f"header: SGLang fails with '{sg.msg_too_small(per_worker, header)}'; "
                    f"set {sg.ENV_BUDGET} to at least {need}",
                    "budget",
                )
            elif per_worker > 0:
                allocation, usable = per_worker, per_worker - header
        else:
            header, lease_control = 0, rel.vmm_lease_control_bytes(consumers)
            allocation = sg.vmm_allocation_bytes(per_worker, request.vmm_granularity)
            if allocation == 0:
                need = rel.smallest_valid_budget_mb(workers, transport, consumers, request.vmm_granularity)
                add(
                    Severity.error,
                    "vmm-below-granularity",
                    f"each worker's {per_worker:,} bytes are less than the CUDA VMM granularity "
                    f"({format_size(request.vmm_granularity)}): SGLang fails with "
                    f"'{sg.msg_below_granularity(per_worker, request.vmm_granularity)}'; "
                    f"set {sg.ENV_BUDGET} to at least {need}",
                    "budget",
                )
            else:
                usable = allocation

    sizes: list[tuple[int, str | None, int | None]] = [(n, None, i) for i, n in enumerate(request.feature_sizes)]
    if request.workload is not None:
        sizes += [(t.bytes, t.item, None) for t in request.workload.tensors]
    features = [feature_fit(request, rel, n, usable, consumers, add, item, index) for n, item, index in sizes]
    if request.workload is not None:
        slices = sum(f.slice_bytes for f in features if f.item is not None)
        findings += workload_findings(request.workload, mb, request.base_gpu_id, slices, request.sglang_version)
    hbm = hbm_estimate(request, rel, per_worker, allocation, add) if allocation else None
    check_bounds(request, effective, hbm, add)
    if hbm is not None:
        eras.release_findings(request, rel, mb, hbm, add)

    kv = None
    # the KV cost of the reservation SGLang makes from 0.5.18; before, the pools only compete with the KV cache
    if request.kv is not None and consumers is not None and transport in rel.kv_reserves:
        landing = hbm.pool_reserved_bytes + hbm.context_bytes if hbm is not None and workers == 1 else None
        _, attn_dp = sg.resolve_attention_dp(request.dp_size, request.attn_dp_size, request.enable_dp_attention)
        kv, kv_notes = plan_kv_cost(request.kv, request.tp_size // attn_dp, mb, landing, rel)
        findings += kv_notes
    if transport == "cuda_vmm" and rel.positional_pool and request.nnodes == 1:  # off on several nodes
        add(
            Severity.info,
            "positional-embeds-pool",
            f"under cuda_vmm SGLang {rel.version} creates a second {sg.ENV_BUDGET} / workers pool per worker "
            f"on GPU {request.base_gpu_id} (cuda_ipc) the first time a request carries CUDA positional-embedding "
            "overrides (only in-process Engine callers can); it is not in the KV-cache reservation",
            "transport",
        )

    errors = any(f.severity is Severity.error for f in findings)
    return Plan(
        status="fail" if errors else "ok",
        budget_bytes=budget.bytes,
        budget_source=budget.source,
        budget_env_variable=budget.variable,
        budget_env_value=None if budget.raw is None else shorten(budget.raw, 64),
        sglang_mm_feature_cache_mb=mb,
        effective_budget_bytes=effective,
        floor_loss_bytes=floor_loss,
        workers=workers,
        tp_size=request.tp_size,
        dp_size=request.dp_size,
        attn_dp_size=request.attn_dp_size,
        enable_dp_attention=request.enable_dp_attention,
        transport=transport,
        per_worker_bytes=per_worker,
        unused_bytes=unused,
        consumers=consumers,
        header_bytes=header,
        lease_control_bytes=lease_control,
        vmm_granularity_bytes=request.vmm_granularity if transport == "cuda_vmm" else None,
        allocation_bytes_per_worker=allocation,
        usable_bytes_per_worker=usable,
        max_inflight_slices=rel.max_inflight_slices if transport == "cuda_ipc" else None,
        features=features,
        hbm=hbm,
        settings=None if errors else _settings(request, rel, mb),
        findings=findings,
        sglang_version=rel.version,
        sglang_version_chosen=request.sglang_version_chosen,
        workload=request.workload,
        kv_cost=kv,
    )


def _consumers(tp_size: int, dp_size: int, attn_dp_size: int, add: Add) -> int | None:
    sizes = (("tp_size", tp_size), ("dp_size", dp_size), ("attn_dp_size", attn_dp_size))
    bad = [(subject, v) for subject, v in sizes if v <= 0]
    for subject, value in bad:
        add(Severity.error, "parallel-not-positive", f"{sglang_flag(subject)} {value}: use 1 or more", subject)
    if bad:
        return None
    if dp_size > 1 and attn_dp_size > 1:
        add(
            Severity.error,
            "dp-replicas-with-attention-dp",
            f"SGLang refuses this layout: '{sg.msg_replicas_with_attention_dp(dp_size, attn_dp_size)}'; "
            "use either --dp-size (replicas) or --attn-dp-size (attention DP)",
            "dp_size",
        )
        return None
    if attn_dp_size > 1 and tp_size % attn_dp_size:
        add(
            Severity.error,
            "attention-dp-not-divisor",
            f"--tp-size {tp_size} is not a multiple of the attention-DP size {attn_dp_size}: "
            "SGLang needs tp_size == attn_tp_size * attn_dp_size; pick sizes that divide",
            "tp_size",
        )
        return None
    # positive sizes that divide leave at least one consumer, so SGLang's own check cannot fire
    return sg.consumer_count(tp_size, dp_size, attn_dp_size)


def _unasked_transport(request: PlanRequest, rel: Release, add: Add) -> None:
    """Say so when the pool planned is one SGLang makes only when asked (check's resolution, one rule)."""
    pooled = request.workload is None or request.workload.pooled
    if request.transport_asked or not pooled or rel.unasked_transport(request.legacy_transport) == request.transport:
        return
    legacy = sg.ENV_LEGACY_TRANSPORT
    where = "on one node" if request.legacy_transport is None else f"with {legacy} off in the environment"
    if rel.transport_flag:
        flag = f"--mm-feature-transport {request.transport}"
        unless, then = "--mm-feature-transport is set", f"{request.transport} pool that {flag}"
    else:
        unless, then = f"{legacy}=1", f"pool that {legacy}=1"
    aside = " (Qwen3-VL on a Hopper GPU of 60 GiB or more aside)" if rel.qwen3_vl_override else ""
    add(
        Severity.info,
        "transport-opt-in",
        f"no transport given: SGLang {rel.version} picks cpu {where} unless {unless}, and makes no pool{aside}; "
        f"this plans the {then} makes",
        "transport",
    )


def _settings(request: PlanRequest, rel: Release, mb: int) -> Settings:
    # a model whose features never enter the pool is better off with no pool at all
    no_pool = request.workload is not None and not request.workload.pooled
    transport = "cpu" if no_pool else request.transport
    env = {} if no_pool else {sg.ENV_BUDGET: str(mb)}
    args = ["--tokenizer-worker-num", str(request.workers)]
    if rel.transport_flag:
        args += ["--mm-feature-transport", transport]
    elif not no_pool:  # before 0.5.16 only the environment turns the pool on
        env[sg.ENV_LEGACY_TRANSPORT] = "1"
    if request.tp_size != 1:
        args += ["--tp-size", str(request.tp_size)]
    dp_size, attn_dp_size = sg.resolve_attention_dp(request.dp_size, request.attn_dp_size, request.enable_dp_attention)
    if rel.has("--attn-dp-size"):
        if dp_size != 1:
            args += ["--dp-size", str(dp_size)]
        if attn_dp_size != 1:
            # --enable-dp-attention is deprecated from 0.5.22: give its replacement
            args += ["--attn-dp-size", str(attn_dp_size)]
    elif attn_dp_size != 1:
        args += ["--dp-size", str(attn_dp_size), "--enable-dp-attention"]
    elif dp_size != 1:
        args += ["--dp-size", str(dp_size)]
    if request.base_gpu_id:
        args += ["--base-gpu-id", str(request.base_gpu_id)]
    model_path = None if request.workload is None else request.workload.model_path
    return Settings(env=env, args=args, model_path=model_path)
