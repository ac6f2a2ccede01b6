"""What fits: features in a fresh worker pool, the HBM the pools take, and what no GPU can hold.

Pure core: no I/O, no typer, rich or torch.
"""

from __future__ import annotations

from typing import Literal

from mmpool_cli.core.bounds import LARGEST_GPU_HBM_BYTES, largest_gpu
from mmpool_cli.core.findings import Severity
from mmpool_cli.core.units import align_up, format_size
from mmpool_cli.engines.sglang import rules as sg
from mmpool_cli.engines.sglang.eras import Add
from mmpool_cli.engines.sglang.models import FeatureFit, HbmEstimate, PlanRequest
from mmpool_cli.engines.sglang.startup import MSG_BASE_GPU_NEGATIVE
from mmpool_cli.engines.sglang.versions import TEXTS_FROM, Release

# CUDA context plus PyTorch runtime that one tokenizer process adds on the base GPU
# (``import torch`` + first allocation), measured by ``mmpool probe`` on an H200 with
# torch 2.11 and driver 580; other drivers and builds differ, so it is an estimate.
DEFAULT_CONTEXT_BYTES = 552_402_944


def feature_fit(
    request: PlanRequest,
    rel: Release,
    nbytes: int,
    usable: int | None,
    consumers: int | None,
    add: Add,
    item: str | None = None,
    index: int | None = None,
) -> FeatureFit:
    # a --feature-size flag or a config's feature_sizes item (the index locates it), or the workload
    subject = "workload" if item is not None else "feature_sizes" if index is None else f"feature_sizes.{index}"
    if request.transport == "cuda_ipc" or consumers is None:
        slice_bytes = rel.slice_bytes(nbytes)
    else:
        slice_bytes = rel.vmm_slice_bytes(nbytes, consumers)
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
        by_bytes = fit = rel.vmm_fit(usable, nbytes, consumers)
        per_worker_needed = align_up(slice_bytes, request.vmm_granularity)
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


def hbm_estimate(request: PlanRequest, rel: Release, per_worker: int | None, allocation: int, add: Add) -> HbmEstimate:
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
    # SGLang's PositionalEmbedsTransport: under cuda_vmm no feature pool can be reused, so the first
    # request with CUDA embedding overrides makes a cuda_ipc pool (torch.empty of the same share)
    positional = 0
    if request.transport == "cuda_vmm" and rel.positional_pool and request.nnodes == 1 and per_worker:
        positional = sg.caching_allocator_reserved(per_worker, request.expandable_segments)
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
        positional_pool_bytes_per_worker=positional,
        positional_pool_bytes=positional * workers,
        max_total_bytes=(reserved + context + positional) * workers,
    )


def check_bounds(request: PlanRequest, effective: int, hbm: HbmEstimate | None, add: Add) -> None:
    """What no GPU can hold, and a GPU index SGLang refuses."""
    if request.base_gpu_id < 0:
        refusal = "no GPU has a negative index"
        if request.sglang_version == TEXTS_FROM:  # the release whose words are quoted
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
