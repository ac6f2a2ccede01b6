"""The plan: what one SGLang release will do with a pool configuration, as integer arithmetic.

The release comes with the request (``PlanRequest.sglang_version``, the newest by default); its
rules (``sglang.versions``) decide the split, the header, the alignment, the consumers, the
transports it has and what the KV cache reserves.

Pure core: no I/O, no typer, rich or torch. ``make_plan`` never raises for a bad
configuration: every problem SGLang would hit becomes an error finding in the plan.
"""

from __future__ import annotations

from typing import Literal

from mmpool_cli.core import eras
from mmpool_cli.core.bounds import LARGEST_GPU_HBM_BYTES, largest_gpu
from mmpool_cli.core.eras import Add
from mmpool_cli.core.excerpt import excerpt, shorten
from mmpool_cli.core.models import Budget, FeatureFit, Finding, HbmEstimate, Plan, PlanRequest, Settings, Severity
from mmpool_cli.core.units import format_exact, format_size, parse_size
from mmpool_cli.errors import SizeError
from mmpool_cli.sglang import rules as sg
from mmpool_cli.sglang import versions
from mmpool_cli.sglang.startup import MSG_BASE_GPU_NEGATIVE, STARTUP_RELEASE
from mmpool_cli.sglang.versions import Release
from mmpool_cli.workload.report import plan_kv_cost, workload_findings

# CUDA context plus PyTorch runtime that one tokenizer process adds on the base GPU
# (``import torch`` + first allocation), measured by ``mmpool probe`` on an H200 with
# torch 2.11 and driver 580; other drivers and builds differ, so it is an estimate.
DEFAULT_CONTEXT_BYTES = 552_402_944


def budget_findings(budget: Budget, sglang_version: str = versions.NEWEST) -> list[Finding]:
    """The findings about where the budget comes from and whether SGLang accepts it, without a plan.

    For a launch that creates no pool, where ``make_plan`` is not called.
    """
    findings: list[Finding] = []

    def add(severity: Severity, code: str, message: str, subject: str | None) -> None:
        findings.append(Finding(severity, code, message, subject=subject))

    rel = versions.release(sglang_version)
    budget = eras.release_budget(budget, rel)
    mb = sg.budget_mb(budget.bytes)
    smallest = eras.smallest(rel, 1, "cuda_ipc", 1, sg.DEFAULT_VMM_GRANULARITY)
    _budget_findings(budget, mb, budget.bytes - mb * sg.MiB, smallest, rel, add)
    return findings


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
    effective = mb * sg.MiB
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
    _budget_findings(budget, mb, floor_loss, smallest, rel, add)
    known_transport = eras.transport_known(rel, transport, add)

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
                need = sg.smallest_valid_budget_mb(workers, transport, consumers, 0)
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
            header, lease_control = 0, sg.vmm_lease_control_bytes(consumers)
            allocation = sg.vmm_allocation_bytes(per_worker, request.vmm_granularity)
            if allocation == 0:
                need = sg.smallest_valid_budget_mb(workers, transport, consumers, request.vmm_granularity)
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

    sizes: list[tuple[int, str | None]] = [(nbytes, None) for nbytes in request.feature_sizes]
    if request.workload is not None:
        sizes += [(t.bytes, t.item) for t in request.workload.tensors]
    features = [_feature_fit(request, rel, nbytes, usable, consumers, add, item) for nbytes, item in sizes]
    if request.workload is not None:
        slices = sum(f.slice_bytes for f in features if f.item is not None)
        findings += workload_findings(request.workload, mb, request.base_gpu_id, slices, request.sglang_version)
    hbm = _hbm(request, rel, per_worker, allocation, add) if allocation else None
    _bounds(request, effective, hbm, add)
    if hbm is not None:
        eras.release_findings(request, rel, mb, hbm, add)

    kv = None
    # the KV cost of the reservation SGLang makes from 0.5.18; before, the pools only compete with the KV cache
    if request.kv is not None and consumers is not None and transport in rel.kv_reserves:
        landing = hbm.pool_reserved_bytes + hbm.context_bytes if hbm is not None and workers == 1 else None
        _, attn_dp = sg.resolve_attention_dp(request.dp_size, request.attn_dp_size, request.enable_dp_attention)
        kv, kv_notes = plan_kv_cost(request.kv, request.tp_size // attn_dp, mb, landing)
        findings += kv_notes
    if transport == "cuda_vmm" and rel.positional_pool:
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
        flag = "--" + subject.replace("_", "-")
        add(Severity.error, "parallel-not-positive", f"{flag} {value}: use 1 or more", subject)
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


def _budget_findings(budget: Budget, mb: int, floor_loss: int, smallest: int, rel: Release, add: Add) -> None:
    # A budget SGLang reads from the environment (or defaults) is the environment's finding.
    subject = "env" if budget.source in ("env", "default") else "budget"
    if budget.source == "default":
        add(Severity.info, "budget-default", f"{sg.ENV_BUDGET} is not set: SGLang uses its default {mb} MiB", "env")
    elif budget.source == "env":
        if budget.invalid and sg.parse_env_int(budget.raw or "") is not None:
            add(
                Severity.error,
                "env-budget-too-large",
                f"{budget.variable}={excerpt(budget.raw or '')} is read by SGLang's int(), but that many MiB "
                "are beyond the 64-bit sizes torch allocates: creating the pool fails at start-up; "
                "set a whole number of MiB, e.g. 4096",
                "env",
            )
        elif budget.invalid:
            add(Severity.error, "env-budget-invalid", _invalid_env_message(budget, rel), "env")
        else:
            read = f"budget read from {budget.variable}={shorten(budget.raw or '')}"
            add(Severity.info, "budget-from-env", read, "env")
        if budget.shadowed is not None and budget.shadowed[1] != budget.raw:
            name, raw = budget.shadowed
            add(
                Severity.warning,
                "env-legacy-overrides",
                f"{budget.variable}={shorten(budget.raw or '')} overrides {name}={shorten(raw)} (SGLang copies SGL_ "
                f"variables over SGLANG_ ones); unset {budget.variable}",
                "env",
            )
    if mb <= 0 and rel.split != "exact":
        # Before 0.5.16 nothing checks the budget: 0.5.11-0.5.15 still give each worker the
        # floor, 0.5.10 makes an empty pool (a negative budget fails in torch.empty, make_plan).
        if mb == 0 or rel.split == "floor":
            got = f"{format_size(rel.floor_bytes)} per worker" if rel.split == "floor" else "an empty pool"
            add(
                Severity.warning,
                "budget-not-positive",
                f"{sg.ENV_BUDGET}={mb}: SGLang {rel.version} does not refuse it and makes {got}; "
                f"use {rel.default_budget_mb} (its default) or another positive size",
                subject,
            )
    elif mb <= 0:
        if budget.bytes > 0:
            add(
                Severity.error,
                "budget-floors-to-zero",
                f"a budget of {format_size(budget.bytes)} is less than 1 MiB, and SGLang takes it "
                f"in whole MiB: 0 fails with '{sg.MSG_TOTAL_NOT_POSITIVE}'; the smallest valid "
                f"budget here is {smallest}MiB ({sg.ENV_BUDGET}={smallest})",
                subject,
            )
        else:
            add(
                Severity.error,
                "budget-not-positive",
                f"{sg.ENV_BUDGET}={mb}: SGLang fails at start-up with "
                f"'{sg.MSG_TOTAL_NOT_POSITIVE}'; use {smallest} or more",
                subject,
            )
    elif floor_loss:
        add(
            Severity.warning,
            "budget-not-whole-mib",
            f"{format_size(budget.bytes)} is not a whole number of MiB: SGLang takes "
            f"{sg.ENV_BUDGET}={mb} and reserves {format_size(mb * sg.MiB)}, "
            f"{floor_loss:,} bytes less",
            subject,
        )
    if mb * sg.MiB > LARGEST_GPU_HBM_BYTES:
        add(
            Severity.error,
            "budget-exceeds-gpu",
            f"{sg.ENV_BUDGET}={mb} ({format_size(mb * sg.MiB)}) is more than any GPU has ({largest_gpu()}), "
            "and every pool lives on the base GPU: SGLang's tokenizer workers would fail to allocate; "
            "set a budget that fits the base GPU",
            subject,
        )


def _invalid_env_message(budget: Budget, rel: Release) -> str:
    fix = "a whole number of MiB, e.g. 1024"
    try:
        meant = parse_size(budget.raw or "")
    except SizeError:
        pass
    else:
        if meant >= sg.MiB:
            fix = f"{meant // sg.MiB} ({format_exact(meant)} in whole MiB)"
    raw = budget.raw or ""
    digits = raw.strip()
    digits = digits[1:] if digits[:1] in ("+", "-") else digits
    what = "is not an integer"
    if digits.isdigit() and digits.isascii():  # int() reads any length of digits but this one's
        what = f"has {len(digits):,} digits, more than Python's int() reads"
    return (
        f"{budget.variable}={excerpt(raw)} {what}: SGLang only warns and uses its "
        f"default {rel.default_budget_mb} MiB; set it to {fix}"
    )


def _feature_fit(
    request: PlanRequest,
    rel: Release,
    nbytes: int,
    usable: int | None,
    consumers: int | None,
    add: Add,
    item: str | None = None,
) -> FeatureFit:
    subject = "feature_sizes" if item is None else "workload"
    if request.transport == "cuda_ipc" or consumers is None:
        slice_bytes = rel.slice_bytes(nbytes)
    else:
        slice_bytes = sg.vmm_slice_bytes(nbytes, consumers)
    if nbytes <= 0:
        add(
            Severity.error,
            "feature-empty",
            "a feature size of 0 bytes: SGLang cannot pool an empty tensor",
            subject,
        )
        return FeatureFit(
            bytes=nbytes, slice_bytes=slice_bytes, fit_per_worker=None, fit_per_node=None, limited_by=None, item=item
        )
    if usable is None or consumers is None:
        return FeatureFit(
            bytes=nbytes, slice_bytes=slice_bytes, fit_per_worker=None, fit_per_node=None, limited_by=None, item=item
        )
    if request.transport == "cuda_ipc":
        by_bytes = usable // slice_bytes
        fit = rel.fit(usable, nbytes)
        per_worker_needed = rel.header_bytes(consumers) + slice_bytes
    else:
        by_bytes = fit = sg.vmm_fit(usable, nbytes, consumers)
        per_worker_needed = sg.align_up(slice_bytes, request.vmm_granularity)
    limited_by: Literal["bytes", "slots"] = "slots" if by_bytes > fit else "bytes"
    if fit == 0:
        need = sg.smallest_budget_mb(1 if rel.split == "none" else request.workers, per_worker_needed)
        add(
            Severity.warning,
            "feature-never-fits",
            f"a {format_size(nbytes)} feature{f' ({item})' if item else ''} never fits in a worker's "
            f"{format_size(usable)} of "
            f"usable pool: SGLang sends every such feature over the slow CPU path; "
            f"{sg.ENV_BUDGET}={need} fits one",
            subject,
        )
    elif limited_by == "slots":
        add(
            Severity.info,
            "feature-slot-cap",
            f"{format_size(nbytes)} features: {by_bytes:,} would fit by bytes, but a pool holds "
            f"at most {rel.max_inflight_slices} in flight",
            subject,
        )
    return FeatureFit(
        bytes=nbytes,
        slice_bytes=slice_bytes,
        fit_per_worker=fit,
        fit_per_node=fit * request.workers,
        limited_by=limited_by,
        item=item,
    )


def _hbm(request: PlanRequest, rel: Release, per_worker: int | None, allocation: int, add: Add) -> HbmEstimate:
    allocator: Literal["caching", "caching-expandable", "vmm"]
    if request.transport == "cuda_vmm":
        allocator, reserved = "vmm", allocation
    else:
        allocator = "caching-expandable" if request.expandable_segments else "caching"
        reserved = sg.caching_allocator_reserved(allocation, request.expandable_segments)
    workers = request.workers
    gpu = request.base_gpu_id if rel.on_base_gpu else 0
    context = DEFAULT_CONTEXT_BYTES if request.context_bytes is None else request.context_bytes
    overhead = reserved - (per_worker or 0)
    if request.transport == "cuda_ipc" and overhead > 0:
        add(
            Severity.warning,
            "allocator-rounding",
            f"PyTorch's caching allocator reserves {format_size(reserved)} for each "
            f"{format_size(allocation)} pool: the pools take {format_size(reserved * workers)} "
            f"on GPU {gpu}, {format_size(overhead * workers)} more than the budget",
            "budget",
        )
    return HbmEstimate(
        base_gpu_id=gpu,
        allocator=allocator,
        pool_reserved_bytes_per_worker=reserved,
        pool_reserved_bytes=reserved * workers,
        allocator_overhead_bytes=overhead * workers,
        processes=workers,
        context_bytes_per_process=context,
        context_bytes=context * workers,
        total_bytes=(reserved + context) * workers,
    )


def _bounds(request: PlanRequest, effective: int, hbm: HbmEstimate | None, add: Add) -> None:
    """What no GPU can hold, and a GPU index SGLang refuses."""
    if request.base_gpu_id < 0:
        refusal = "no GPU has a negative index"
        if request.sglang_version == STARTUP_RELEASE:  # the release whose words are quoted
            refusal = f"SGLang fails at start-up with '{MSG_BASE_GPU_NEGATIVE}'"
        add(
            Severity.error,
            "base-gpu-id-negative",
            f"--base-gpu-id {request.base_gpu_id}: {refusal}; use 0 or more",
            "base_gpu_id",
        )
    if effective <= LARGEST_GPU_HBM_BYTES and hbm is not None and hbm.total_bytes > LARGEST_GPU_HBM_BYTES:
        add(
            Severity.error,
            "hbm-exceeds-gpu",
            f"the pools and {hbm.processes} tokenizer CUDA contexts need {format_size(hbm.total_bytes)} on GPU "
            f"{request.base_gpu_id}, more than any GPU has ({largest_gpu()}); use fewer tokenizer workers "
            "or a smaller budget",
            "workers",
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
    return Settings(env=env, args=args)
