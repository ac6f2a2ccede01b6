"""SGLang's transport resolution and the pool plan, for parsed flags and an environment.

The pool flags (after the ``--config`` merge) and the environment go through the chosen release's
transport resolution where it can be known offline; what depends on the model or the machine is
said as an assumption, or taken from ``Assumptions``. ``mmpool check`` uses it for a launch
command, ``mmpool validate`` for an SGLang ``--config`` file. Pure core: no typer, rich or torch.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from mmpool_cli.core.findings import Finding, Severity
from mmpool_cli.core.units import format_size
from mmpool_cli.engines.sglang import env_vars as envmod
from mmpool_cli.engines.sglang import rules as sg
from mmpool_cli.engines.sglang import settings, versions
from mmpool_cli.engines.sglang.args import Reading
from mmpool_cli.engines.sglang.budget import budget_findings
from mmpool_cli.engines.sglang.env_vars import LaunchEnv
from mmpool_cli.engines.sglang.models import Budget, Plan, PlanRequest
from mmpool_cli.engines.sglang.plan import make_plan
from mmpool_cli.engines.sglang.startup import startup_errors
from mmpool_cli.engines.sglang.versions import TEXTS_FROM

ENV = envmod.ENV_LOCATION
# The option that sets each plan subject in a launch (the budget's findings stay with the input:
# the launch command, or the SGLang config file that validate reads).
SUBJECT_DESTS = settings.SUBJECT_DESTS  # where each plan subject is on a launch command (settings.py)


@dataclass(frozen=True)
class Assumptions:
    """What the launch command cannot say: the model family, the GPU, the features to plan for."""

    hf_model_type: str | None = None
    sm90: bool | None = None
    gpu_memory: int | None = None
    feature_sizes: tuple[int, ...] = ()
    context_bytes: int | None = None
    vmm_granularity: int = sg.DEFAULT_VMM_GRANULARITY
    probe_pidfd: bool = False
    # The SGLang release whose parser and rules apply, and how it was chosen (versions.choose).
    sglang_version: str = versions.NEWEST
    sglang_version_chosen: str = "newest"


@dataclass
class Resolution:
    """The transport SGLang would pick, the budget it would read, the plan, and the findings."""

    transport: str
    findings: list[Finding]
    plan: Plan | None
    request: PlanRequest | None = None  # what ``plan`` was made from (``check --from`` replays the pool it makes)


def resolve(reading: Reading, launch: LaunchEnv, assume: Assumptions) -> Resolution:
    """SGLang's transport resolution and the pool plan for parsed flags and an environment.

    What is wrong with the environment itself is ``env_findings``'s to say, not this.
    """
    findings: list[Finding] = []

    def add(severity: Severity, code: str, message: str, location: str | None) -> None:
        findings.append(Finding(severity, code, message, location))

    def origin(dest: str) -> str | None:
        setting = reading.settings.get(dest)
        return setting.origin if setting else None

    rel = versions.release(assume.sglang_version)
    # SGLang's start-up refusals whatever the transport, in the words of the release they were read from
    refused = startup_errors(reading.get) if rel.version == TEXTS_FROM else []
    for error in refused:
        add(Severity.error, error.code, error.message, origin(error.dest))
    requested: str | None = reading.get("mm_feature_transport")
    nnodes, pp_size = reading.get("nnodes"), reading.get("pp_size")
    multimodal = not reading.get("language_model_only")
    budget = launch.budget

    if rel.transport_flag and reading.get("keep_mm_feature_on_device"):
        requested = _keep_on_device(rel, requested, origin("keep_mm_feature_on_device"), add)
    qwen3 = assume.hf_model_type in sg.QWEN3_VL_MODEL_TYPES
    large_hopper = bool(assume.sm90) and (assume.gpu_memory or 0) >= sg.QWEN3_VL_MIN_GPU_BYTES
    override = qwen3 and large_hopper and multimodal and rel.qwen3_vl_override
    preprocess = reading.get("mm_preprocess_cache_size_mb") or 0
    retention = preprocess > 0 or (launch.vlm_cache.retention if override else False)
    source = "--mm-feature-transport" if requested else None
    if override and requested is None and nnodes == 1 and not retention:
        requested, source = "cuda_ipc", "the Qwen3-VL override"
        add(
            Severity.info,
            "qwen3-vl-override",
            "Qwen3-VL on a Hopper GPU with at least 60 GiB: SGLang sets --mm-feature-transport cuda_ipc itself",
            None,
        )
    if (
        override
        and requested == "cuda_ipc"
        and not launch.budget_is_set
        and (reading.get("max_running_requests") or 0) >= sg.QWEN3_VL_MIN_RUNNING_REQUESTS
        and not retention
    ):
        budget = envmod.budget_override()
        add(
            Severity.info,
            "qwen3-vl-budget",
            f"Qwen3-VL with --max-running-requests >= {sg.QWEN3_VL_MIN_RUNNING_REQUESTS} and "
            f"{sg.ENV_BUDGET} unset: SGLang sets {sg.ENV_BUDGET}={sg.QWEN3_VL_BUDGET_MB}",
            origin("max_running_requests"),
        )
    if qwen3 and rel.qwen3_vl_override and not large_hopper and (assume.sm90 is None or assume.gpu_memory is None):
        add(
            Severity.warning,
            "assumption-gpu",
            "for Qwen3-VL SGLang picks cuda_ipc (and may raise the budget to 3072 MiB) on Hopper GPUs (CUDA >= "
            "12.3) with at least 60 GiB; assumed not such a GPU: pass --sm90 and --gpu-memory to decide",
            None,
        )

    legacy_set, legacy_on = launch.legacy_transport_set, launch.legacy_transport_on
    transport = requested
    if transport is None:
        if legacy_set:
            transport, source = rel.unasked_transport(legacy_on), f"{sg.ENV_LEGACY_TRANSPORT}"
        elif rel.default_policy == "env":
            transport, source = "cpu", f"{sg.ENV_LEGACY_TRANSPORT} unset; SGLang {rel.version} has no flag for it"
        elif rel.default_policy == "opt-in":
            transport, source = "cpu", f"SGLang {rel.version}'s default"
        elif reading.get("encoder_only"):
            transport, source = "cpu", "--encoder-only"
        elif rel.default_policy == "auto-cuda_ipc-single-node":
            # every CUDA launch on one node without disaggregation; a text-only model makes no pool
            single = nnodes == 1 and reading.get("disaggregation_mode") == "null"
            transport = rel.unasked_transport(None) if single else "cpu"
            source = f"SGLang {rel.version}'s default" + (" on one node" if single else "")
        elif not multimodal or reading.get("disaggregation_mode") != "null":
            transport, source = "cpu", "SGLang's default for this launch"
        elif nnodes == 1:
            transport, source = "cpu", "SGLang's default on one node"
            if assume.hf_model_type is None:
                add(
                    Severity.info,
                    "assumption-model",
                    "--mm-feature-transport is not set: assumed a multimodal model that SGLang does not "
                    "switch to cuda_ipc itself (Qwen3-VL on a large Hopper GPU would be; pass "
                    "--hf-model-type); a text-only model never creates a pool",
                    None,
                )
        else:
            transport, source = "cpu", "SGLang's default on several nodes"
            add(
                Severity.info,
                "assumption-multinode",
                f"--nnodes {nnodes}: SGLang picks cuda_vmm only on an MNNVL fabric with an IMEX channel "
                "(/dev/nvidia-caps-imex-channels/channel0) and a model that supports it, which cannot be "
                "known before launch; assumed cpu. Set --mm-feature-transport to be sure",
                origin("nnodes"),
            )
    elif legacy_set and legacy_on != (transport == "cuda_ipc") and source == "--mm-feature-transport":
        add(
            Severity.warning,
            "env-legacy-transport-conflict",
            f"SGLang warns '--mm-feature-transport={transport} overrides the conflicting legacy "
            f"{sg.ENV_LEGACY_TRANSPORT}={int(legacy_on)} setting.'; unset {sg.ENV_LEGACY_TRANSPORT}",
            ENV,
        )
    if reading.get("encoder_only") and transport in sg.POOL_TRANSPORTS:
        add(
            Severity.warning,
            "encoder-only-cpu",
            f"--encoder-only: SGLang replaces --mm-feature-transport {transport} with cpu",
            origin("encoder_only"),
        )
        transport, source = "cpu", "--encoder-only"
    for message in sg.transport_errors(transport, nnodes, pp_size) if rel.transport_flag else []:
        add(
            Severity.error,
            "transport-layout",
            f"SGLang fails with '{message}'; "
            + ("use --mm-feature-transport cpu on several nodes" if "node" in message else "use cuda_ipc or cpu"),
            origin("mm_feature_transport") or origin("nnodes") or origin("pp_size"),
        )

    if transport not in sg.POOL_TRANSPORTS or not multimodal:
        why = "a text-only launch (--language-model-only)" if not multimodal else f"cpu ({source})"
        ask = ""
        if multimodal and nnodes == 1 and source not in ("--mm-feature-transport", "--encoder-only"):
            switch = "--mm-feature-transport cuda_ipc" if rel.transport_flag else f"{sg.ENV_LEGACY_TRANSPORT}=1"
            ask = f"; {switch} makes one"
        add(
            Severity.info,
            "no-pool",
            f"the transport resolves to {why}: no feature pool exists and nothing is reserved for one on GPU "
            f"{reading.get('base_gpu_id')}{ask}",
            origin("mm_feature_transport"),
        )
        if budget.source == "env":
            findings += [f.at(ENV) for f in budget_findings(budget, rel.version) if f.severity is not Severity.info]
        return Resolution("cpu" if multimodal else str(transport), findings, None)

    request = _request(reading, launch, budget, transport, assume)
    plan = make_plan(request)
    for f in plan.findings:
        if f.code in {e.code for e in refused}:  # already reported, at its flag
            continue
        findings.append(f.at(ENV if f.subject == "env" else origin(SUBJECT_DESTS.get(f.subject or "", ""))))
    if plan.hbm is not None:
        h = plan.hbm
        share = ""
        if assume.gpu_memory:  # of the larger figure, the most the tokenizer processes can take
            permille = h.max_total_bytes * 1000 // assume.gpu_memory
            share = f", {permille // 10}.{permille % 10}% of its {format_size(assume.gpu_memory)}"
        second = ""
        if h.positional_pool_bytes:
            second = (
                f"; at most {format_size(h.max_total_bytes)} with the {format_size(h.positional_pool_bytes)} of "
                "positional-embeds pools a request with CUDA embedding overrides creates"
            )
        add(
            Severity.info,
            "hbm-base-gpu",
            f"{transport} reserves {format_size(h.pool_reserved_bytes)} for {h.processes} pool(s) on GPU "
            f"{h.base_gpu_id}, plus about {format_size(h.context_bytes)} of tokenizer CUDA contexts: "
            f"{format_size(h.total_bytes)}{second}{share}",
            origin("base_gpu_id"),
        )
    if transport == "cuda_ipc" and launch.expandable_segments:
        findings += _pidfd_findings(assume.probe_pidfd)
    return Resolution(transport, findings, plan, request)


def _keep_on_device(
    rel: versions.Release,
    requested: str | None,
    where: str | None,
    add: Callable[[Severity, str, str, str | None], None],
) -> str:
    """0.5.16-0.5.20: the deprecated --keep-mm-feature-on-device means cuda_ipc, and refuses another transport."""
    if requested not in (None, "cuda_ipc"):
        add(
            Severity.error,
            "keep-on-device-conflict",
            f"SGLang {rel.version} fails with '--keep-mm-feature-on-device conflicts with "
            f"--mm-feature-transport={requested}. Use only --mm-feature-transport=cuda_ipc.'; drop one of them",
            where,
        )
    else:
        add(
            Severity.warning,
            "keep-on-device-deprecated",
            f"SGLang {rel.version} warns '--keep-mm-feature-on-device is deprecated; using "
            "--mm-feature-transport=cuda_ipc instead.'; write --mm-feature-transport cuda_ipc, the flag is "
            "gone after 0.5.20",
            where,
        )
    return "cuda_ipc"


def _request(reading: Reading, launch: LaunchEnv, budget: Budget, transport: str, assume: Assumptions) -> PlanRequest:
    dp_size, attn_dp_size = reading.get("dp_size"), reading.get("attn_dp_size")
    dwdp = reading.get("dwdp_size")
    if dwdp > 1:  # --dwdp-size declares attention DP of that size (parallel_hook)
        dp_size, attn_dp_size = 1, dwdp
    return PlanRequest(
        budget=budget,
        vlm_cache=launch.vlm_cache if launch.vlm_cache.variable else None,
        workers=reading.get("tokenizer_worker_num"),
        tp_size=reading.get("tp_size"),
        dp_size=dp_size,
        attn_dp_size=attn_dp_size,
        enable_dp_attention=reading.get("enable_dp_attention"),
        transport="cuda_vmm" if transport == "cuda_vmm" else "cuda_ipc",
        vmm_granularity=assume.vmm_granularity,
        feature_sizes=assume.feature_sizes,
        base_gpu_id=reading.get("base_gpu_id"),
        nnodes=reading.get("nnodes"),
        expandable_segments=launch.expandable_segments,
        context_bytes=assume.context_bytes,
        sglang_version=assume.sglang_version,
        sglang_version_chosen=assume.sglang_version_chosen,
    )


def _pidfd_findings(probe: bool) -> list[Finding]:
    from mmpool_cli.engines.sglang.pidfd import FIXES, check_pidfd_getfd

    intro = "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True with cuda_ipc moves memory with pidfd_getfd"
    if not probe:
        return [
            Finding(
                Severity.warning,
                "pidfd-getfd-needed",
                f"{intro}, which needs ptrace rights between SGLang's processes; "
                f"'mmpool check --probe-pidfd' tests this machine; if refused: {FIXES}",
                ENV,
            )
        ]
    result = check_pidfd_getfd()
    if result.allowed:
        return [Finding(Severity.info, "pidfd-getfd-allowed", f"{intro}: {result.detail}", ENV)]
    if result.allowed is None:
        return [Finding(Severity.warning, "pidfd-getfd-unknown", f"{intro}: {result.detail}; {FIXES}", ENV)]
    return [
        Finding(
            Severity.error,
            "pidfd-getfd-refused",
            f"{intro}: {result.detail}; SGLang's scheduler would fail with 'pidfd_getfd: Operation not "
            f"permitted'; {FIXES}",
            ENV,
        )
    ]
