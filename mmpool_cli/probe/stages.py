"""The probe's stage checks: what each measurement means, as findings. No processes are started here.

The runner (``mmpool_cli.probe.runner``) drives the children and hands their replies to these
functions; each records figures and findings on its ``Stage``.
"""

from __future__ import annotations

import time
from fractions import Fraction
from typing import Any

from mmpool_cli.core.findings import Severity
from mmpool_cli.core.units import MiB, format_size
from mmpool_cli.engines.sglang.models import Plan
from mmpool_cli.engines.sglang.pidfd import FIXES, check_pidfd_getfd
from mmpool_cli.probe import devices as dv
from mmpool_cli.probe.probe_report import GpuInfo, Stage
from mmpool_cli.probe.processes import Child, ChildFailed

BASELINE_TOLERANCE = 2 * MiB
BASELINE_WAIT_S = 10.0
ACK_WAIT_S = 10.0


def stage_gpu(stage: Stage, request: Any, plan: Plan, gpus: list[GpuInfo], base: GpuInfo | None) -> None:
    """Stage 1: the base GPU found through NVML, and whether the predicted reservation fits its free memory."""
    start = time.perf_counter()
    stage.status = "pass"
    stage.figures["cuda_visible_devices"] = request.cuda_visible_devices
    if base is None:
        visible = sum(g.cuda_index is not None for g in gpus)
        stage.add(
            Severity.error,
            "base-gpu-missing",
            f"--base-gpu-id {request.plan.base_gpu_id} names no GPU: {visible} visible "
            f"(CUDA_VISIBLE_DEVICES={request.cuda_visible_devices!r}); pick 0 to {max(visible - 1, 0)}",
        )
        stage.seconds = time.perf_counter() - start
        return
    stage.figures.update(base_gpu=base.cuda_index, free_bytes=base.free_bytes, total_bytes=base.total_bytes)
    if plan.hbm is None:
        stage.add(Severity.error, "plan-failed", "the plan has errors; fix them first (see the plan's findings)")
        stage.seconds = time.perf_counter() - start
        return
    need = plan.hbm.total_bytes
    stage.figures.update(predicted_bytes=need, headroom_bytes=base.free_bytes - need)
    if need > base.free_bytes:
        stage.add(
            Severity.error,
            "does-not-fit",
            f"the pools and tokenizer contexts need {format_size(need)} on GPU {base.cuda_index} but "
            f"{format_size(base.free_bytes)} is free; free memory there or lower the budget or the workers",
        )
    else:
        stage.add(
            Severity.info,
            "fits",
            f"{format_size(need)} predicted of {format_size(base.free_bytes)} free on GPU {base.cuda_index} "
            f"({base.name})",
        )
    if request.mem_fraction_static is not None:
        _kv_headroom(stage, request.mem_fraction_static, plan, base)
    stage.seconds = time.perf_counter() - start


def _kv_headroom(stage: Stage, fraction: Fraction, plan: Plan, base: GpuInfo) -> None:
    assert plan.hbm is not None
    # SGLang sizes its static pool (weights + KV) to mem_fraction_static of the memory it sees, and
    # takes the budget itself out of the KV cache; the contexts and allocator rounding on the base
    # GPU are not in that reservation, so they come out of the (1 - fraction) headroom.
    headroom = base.free_bytes - base.free_bytes * fraction.numerator // fraction.denominator
    unreserved = plan.hbm.context_bytes + plan.hbm.allocator_overhead_bytes
    stage.figures.update(kv_headroom_bytes=headroom, unreserved_bytes=unreserved)
    share = Fraction(unreserved, headroom) if headroom else Fraction(1)
    largest = 1 - Fraction(2 * unreserved, base.free_bytes)
    hint = f"--mem-fraction-static {float(largest) - 0.005:.2f} or lower, or fewer tokenizer workers"
    text = (
        f"the tokenizer contexts and allocator rounding ({format_size(unreserved)}) are not in SGLang's "
        f"reservation and take {float(share):.0%} of the {format_size(headroom)} that "
        f"--mem-fraction-static {float(fraction):g} leaves on GPU {base.cuda_index}"
    )
    if share >= 1:
        stage.add(Severity.error, "kv-headroom-exceeded", f"{text}: activations will run out of memory; use {hint}")
    elif share >= Fraction(1, 2):
        stage.add(Severity.warning, "kv-headroom-tight", f"{text}; consider {hint}")
    else:
        stage.add(Severity.info, "kv-headroom", text)


def stage_vmm(stage: Stage, facts: dict[str, Any], plan: Plan) -> None:
    """Stage 4: the VMM granularity and handle types a child found, against the plan."""
    if not facts.get("available"):
        stage.figures["skipped"] = "cuda-bindings is not installed (pip install cuda-bindings)"
        if plan.transport == "cuda_vmm":
            stage.add(
                Severity.warning,
                "vmm-unchecked",
                "cuda_vmm is planned but cuda-bindings is missing, and SGLang needs it too: pip install cuda-bindings",
            )
        return
    stage.status = "pass"
    stage.figures["handle_types"] = facts["handle_types"]
    working = [name for name, e in facts["handle_types"].items() if e.get("create")]
    stage.figures["working_handle_types"] = working
    posix = facts["handle_types"].get("POSIX_FD", {})
    granularity = posix.get("recommended")
    if plan.transport == "cuda_vmm":
        if "FABRIC" not in working and "POSIX_FD" not in working:
            stage.add(Severity.error, "vmm-no-handle", "cuMemCreate accepts neither FABRIC nor POSIX_FD handles here")
        if granularity and granularity != plan.vmm_granularity_bytes:
            stage.add(
                Severity.warning,
                "vmm-granularity-differs",
                f"the GPU's recommended VMM granularity is {format_size(granularity)}, the plan assumed "
                f"{format_size(plan.vmm_granularity_bytes or 0)}: re-plan with --vmm-granularity {granularity}",
            )
    stage.add(
        Severity.info,
        "vmm-facts",
        f"VMM granularity {format_size(granularity or 0)} (POSIX_FD, recommended); cuMemCreate works with "
        f"{', '.join(working) or 'no handle type'}"
        + ("" if "FABRIC" in working else " (FABRIC needs an IMEX channel: multi-node cuda_vmm cannot work here)"),
    )


def round_trip(stage: Stage, mode: str, producer: Child, consumer: Child, offset: int, length: int, seed: int) -> None:
    """Stage 3, one allocator mode: the producer shares its pool, the consumer reads a slice and acknowledges."""
    figures: dict[str, Any] = {"slice_bytes": length}
    stage.figures[mode] = figures
    producer.ask("write_slice", offset=offset, nbytes=length, seed=seed)
    payload = producer.ask("share")["payload"]
    try:
        opened = consumer.ask("open_shared", payload=payload)
    except ChildFailed as e:
        figures["opened"] = False
        _ipc_refused(stage, mode, str(e))
        return
    figures.update(opened=True, open_seconds=opened["seconds"])
    read = consumer.ask("read_slice", offset=offset, nbytes=length, seed=seed)
    figures.update(read_ok=read["ok"], read_gbps=read["gbps"] and round(read["gbps"], 1))
    if not read["ok"]:
        stage.add(
            Severity.error, "ipc-data-mismatch", f"{mode}: the consumer read different bytes than the producer wrote"
        )
        return
    ack = producer.ask("wait_ack", value=seed, wait_seconds=min(producer.deadline.left(), ACK_WAIT_S))
    figures.update(ack_seen=ack["seen"], ack_seconds=ack["seconds"])
    if not ack["seen"]:
        stage.add(Severity.error, "ipc-ack-missing", f"{mode}: the producer never saw the consumer's acknowledgement")
        return
    consumer.ask("release")
    stage.add(Severity.info, "ipc-ok", f"{mode}: shared, read back exactly and acknowledged")


def _ipc_refused(stage: Stage, mode: str, error: str) -> None:
    if mode == "expandable_segments":
        check = check_pidfd_getfd()
        stage.figures["pidfd_getfd"] = {"allowed": check.allowed, "detail": check.detail}
        if check.allowed is False or "pidfd" in error or "Operation not permitted" in error:
            stage.add(
                Severity.error,
                "ipc-pidfd-refused",
                f"with PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True the consumer cannot open the pool "
                f"({check.detail}; {error}): {FIXES}",
            )
            return
    stage.add(Severity.error, "ipc-open-failed", f"{mode}: the consumer could not open the shared pool: {error}")


def compare(stage: Stage, what: str, measured: int, predicted: int, unit: str) -> None:
    """A measured size against the plan's prediction: an info finding, or a warning for the allocator."""
    if measured == predicted:
        stage.add(Severity.info, f"{what}-as-predicted", f"{what}: {format_size(measured)} {unit}, as predicted")
        return
    stage.add(
        Severity.warning if what == "allocator" else Severity.info,
        f"{what}-differs",
        f"{what}: measured {format_size(measured)} {unit}, predicted {format_size(predicted)} "
        f"({measured - predicted:+,} bytes)",
    )


def baseline(stage: Stage, base: GpuInfo, baseline: int, wait: float = BASELINE_WAIT_S) -> None:
    """Stage 5: free memory back at its baseline, waiting up to ``wait`` seconds for the driver to release it."""
    deadline = time.perf_counter() + wait
    free = dv.free_bytes(base.nvml_index)
    while abs(baseline - free) > BASELINE_TOLERANCE and time.perf_counter() < deadline:
        time.sleep(0.05)
        free = dv.free_bytes(base.nvml_index)
    stage.figures["free_after_bytes"] = free
    if abs(baseline - free) > BASELINE_TOLERANCE:
        stage.add(
            Severity.error,
            "memory-not-released",
            f"free memory on GPU {base.cuda_index} is {format_size(free)} after the stage, "
            f"{format_size(baseline)} before: {baseline - free:+,} bytes still held",
        )
