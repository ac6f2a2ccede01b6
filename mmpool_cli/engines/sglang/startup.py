"""SGLang's start-up refusals of the flags mmpool reads, in SGLang's own words.

``ServerArgs.check_server_args`` (``arg_groups/validation_hook.py``) and the resolution hooks that
run before it (``handle_deprecated_dp_attention``, ``handle_dwdp``, ``handle_data_parallelism`` in
``arg_groups/parallel_hook.py``) refuse these values whatever the feature transport, so a launch
fails with them even when no pool exists. SGLang stops at the first; mmpool reports every one.
They were read from ``versions.TEXTS_FROM``; other releases are not checked for them.
Pure rules: no I/O.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from mmpool_cli.engines.sglang import rules as sg

MSG_BASE_GPU_NEGATIVE = "base_gpu_id must be non-negative"
MSG_GPU_ID_STEP = "gpu_id_step must be positive"
MSG_TP_NODES = "tp_size must be divisible by number of nodes"
MSG_DP_MULTI_NODE = (
    "multi-node data-parallel replicas are not supported; use attention DP (--attn-dp-size) across nodes"
)
MSG_DWDP_MODE = "DWDP requires --disaggregation-mode null or prefill"


@dataclass(frozen=True)
class StartupError:
    """One refusal: a finding code, the flag (its ``dest``) that carries the bad value, the message."""

    code: str
    dest: str
    message: str


def startup_errors(get: Callable[[str], Any]) -> list[StartupError]:
    """Every start-up refusal of the launch whose flag values ``get(dest)`` returns (SGLang's defaults if unset)."""
    errors: list[StartupError] = []

    def refuse(code: str, dest: str, message: str) -> None:
        errors.append(StartupError(code, dest, message))

    workers = get("tokenizer_worker_num")
    if workers < 1:
        refuse(
            "workers-not-positive",
            "tokenizer_worker_num",
            f"--tokenizer-worker-num {workers}: SGLang fails at start-up with '{sg.MSG_WORKERS_NOT_POSITIVE}'; "
            "use 1 or more",
        )
    base, step = get("base_gpu_id"), get("gpu_id_step")
    if base < 0:
        refuse(
            "base-gpu-id-negative",
            "base_gpu_id",
            f"--base-gpu-id {base}: SGLang fails at start-up with '{MSG_BASE_GPU_NEGATIVE}'; use 0 or more",
        )
    if step < 1:
        refuse(
            "gpu-id-step-not-positive",
            "gpu_id_step",
            f"--gpu-id-step {step}: SGLang fails at start-up with '{MSG_GPU_ID_STEP}'; use 1 or more",
        )
    tp, pp, nnodes = get("tp_size"), get("pp_size"), get("nnodes")
    for dest, flag, value in (
        ("tp_size", "--tp-size", tp),
        ("pp_size", "--pp-size", pp),
        ("dp_size", "--dp-size", get("dp_size")),
    ):
        if value < 1:
            refuse("parallel-not-positive", dest, f"{flag} {value}: SGLang has no rank layout for it; use 1 or more")
    if nnodes < 1:
        crash = (
            " (its check 'tp_size % nnodes' fails with ZeroDivisionError: integer modulo by zero)"
            if nnodes == 0
            else ""
        )
        refuse("nnodes-not-positive", "nnodes", f"--nnodes {nnodes}: not a number of nodes{crash}; use 1 or more")
    elif tp >= 1 and pp >= 1 and tp * pp % nnodes:
        # skipped by SGLang only for an elastic-EP scale-up joiner (--elastic-ep-join-mode scale)
        refuse(
            "tp-not-divisible-by-nodes",
            "nnodes",
            f"--tp-size {tp} × --pp-size {pp} = {tp * pp} ranks do not split over --nnodes {nnodes}: SGLang fails "
            f"at start-up with '{MSG_TP_NODES}'; pick sizes that divide",
        )
    errors += _data_parallel(get, tp, nnodes)
    return errors


def _data_parallel(get: Callable[[str], Any], tp: int, nnodes: int) -> list[StartupError]:
    """The DP layout after SGLang rewrites ``--enable-dp-attention`` and ``--dwdp-size``, in its hooks' order."""
    errors: list[StartupError] = []
    dp, attn_dp = sg.resolve_attention_dp(get("dp_size"), get("attn_dp_size"), get("enable_dp_attention"))
    dwdp = get("dwdp_size")
    if dwdp > 1:  # handle_dwdp: attention DP of that width, no replicas
        if dwdp != tp:
            errors.append(
                StartupError(
                    "dwdp-not-tp",
                    "dwdp_size",
                    f"--dwdp-size {dwdp}: SGLang fails at start-up with 'dwdp_size ({dwdp}) must equal tp_size ({tp})'",
                )
            )
        if get("disaggregation_mode") not in ("null", "prefill"):
            errors.append(StartupError("dwdp-disaggregation", "dwdp_size", f"SGLang fails with '{MSG_DWDP_MODE}'"))
        dp, attn_dp = 1, dwdp
    if attn_dp < 1:
        errors.append(
            StartupError(
                "parallel-not-positive",
                "attn_dp_size",
                f"--attn-dp-size {attn_dp}: SGLang fails with '--attn-dp-size must be positive (got {attn_dp}).'; "
                "use 1 or more",
            )
        )
        return errors
    if attn_dp > 1 and dp > 1:
        errors.append(
            StartupError(
                "dp-replicas-with-attention-dp",
                "dp_size",
                f"SGLang refuses this layout: '{sg.msg_replicas_with_attention_dp(dp, attn_dp)}'; "
                "use either --dp-size (replicas) or --attn-dp-size (attention DP)",
            )
        )
    elif attn_dp > 1 and tp >= 1 and tp % attn_dp:
        errors.append(
            StartupError(
                "attention-dp-not-divisor",
                "tp_size",
                f"--tp-size {tp} is not a multiple of the attention-DP size {attn_dp}: SGLang fails with a bare "
                "AssertionError ('assert cfg.tp_size % cfg.attn_dp_size == 0' in handle_data_parallelism); "
                "pick sizes that divide",
            )
        )
    if dp > 1 and nnodes != 1:
        errors.append(
            StartupError(
                "dp-replicas-multi-node",
                "dp_size",
                f"--dp-size {dp} on --nnodes {nnodes}: SGLang fails with '{MSG_DP_MULTI_NODE}'",
            )
        )
    return errors
