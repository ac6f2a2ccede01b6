"""The plan of a vLLM launch's multimodal memory: processor cache, encoder cache, GPU decode pool.

``make_plan`` turns a ``VllmRequest`` (what the flags or a launch command say, the model and the
items of one request) into a ``VllmPlan`` whose ``to_json`` is the ``vllm`` object of mmpool's JSON
output, with every finding it has. Pure core: standard library only.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import asdict
from decimal import ROUND_CEILING, Decimal, localcontext
from pathlib import Path
from typing import Any

from mmpool_cli.core.bounds import LARGEST_HOST_MEMORY_BYTES, largest_host
from mmpool_cli.core.findings import Finding, Severity
from mmpool_cli.engines.vllm import encoder_budget as eb
from mmpool_cli.engines.vllm import gpu_pool, item_bytes, processor_cache
from mmpool_cli.engines.vllm import video as vv
from mmpool_cli.engines.vllm.gib import GiB, bytes_of
from mmpool_cli.engines.vllm.plan_encoder import encoder_cache, video_loader
from mmpool_cli.engines.vllm.request import DEFAULT_CACHE_GB, FAMILY_DEFAULTS, VllmPlan, VllmRequest, add_finding
from mmpool_cli.engines.vllm.versions import Release
from mmpool_cli.workload.hf import Model, _read_json, _text_config
from mmpool_cli.workload.items import Item, Video


def _model_facts(model: Model | None) -> dict[str, Any]:
    """Context length, embedding elements per token, MoE and the KV shape from ``config.json``."""
    name = model.family.name if model else None
    facts: dict[str, Any] = dict(FAMILY_DEFAULTS.get(name or "", {}))
    facts["moe"] = None
    if model is None or model.config_path is None:
        return facts
    config = _read_json(Path(model.config_path))
    text = _text_config(config)
    if isinstance(text.get("max_position_embeddings"), int):
        facts["max_model_len"] = text["max_position_embeddings"]
    raw_vision = config.get("vision_config")
    vision: dict[str, Any] = raw_vision if isinstance(raw_vision, dict) else {}
    if name == "qwen3-vl" and isinstance(vision.get("out_hidden_size"), int):
        deepstack = vision.get("deepstack_visual_indexes") or []
        facts["embed_elements"] = vision["out_hidden_size"] * (1 + len(deepstack))
    elif isinstance(text.get("hidden_size"), int):
        facts["embed_elements"] = text["hidden_size"]
    experts = [text.get(k) for k in ("num_experts", "num_local_experts", "n_routed_experts")]
    facts["moe"] = any(isinstance(e, int) and e > 0 for e in experts) or str(config.get("model_type")).endswith("_moe")
    return facts


def smallest_gib(processes: int) -> str:
    """The smallest short decimal GiB value whose ``int(gb * 2**30) // processes`` is at least 1."""
    with localcontext() as ctx:
        ctx.prec, ctx.rounding = 3, ROUND_CEILING
        value = +(Decimal(processes) / Decimal(GiB))
    while bytes_of(float(value)) // processes < 1:
        value = value.next_plus()
    return f"{value:g}"


def make_plan(req: VllmRequest) -> VllmPlan:
    """The processor cache, encoder cache and GPU decode pool of ``req``, with findings."""
    findings: list[Finding] = []
    rel = req.release
    facts = _model_facts(req.model)
    for v in (req.cache_gb, req.ipc_gb):
        if v is not None and v.rounded:
            add_finding(
                findings,
                req,
                Severity.warning,
                "vllm-gib-rounded",
                f"{v.flag} {v.text}: vLLM reads it as the float {v.value!r} and uses {v.bytes:,} B, not the "
                "bytes of the decimal written; write the value the float holds",
                v.flag[2:].replace("-", "_"),
            )
        if v is not None and v.odd_spelling:
            add_finding(
                findings,
                req,
                Severity.warning,
                "vllm-gib-spelling",
                f"{v.flag} {v.text!r}: Python's float() reads this spelling as {v.value!r} GiB; write it as plain "
                "digits",
                v.flag[2:].replace("-", "_"),
            )
    _dp_findings(findings, req, facts)

    # processor cache (host RAM)
    cache_bytes = DEFAULT_CACHE_GB * GiB if req.cache_gb is None else req.cache_gb.bytes
    pc = processor_cache.plan(
        cache_bytes,
        req.cache_type,
        req.dp,
        shm_extra_bytes=rel.shm_extra_bytes,
        shm_max_object_mb=req.shm_max_object_mb,
    )
    if pc.layout != req.cache_type and pc.layout == "processor_only":
        add_finding(
            findings,
            req,
            Severity.info,
            "vllm-processor-only-cache",
            f"with {pc.api_processes} API process(es) and DP {req.dp.size} vLLM {rel.version} cannot mirror the "
            f"cache into the engine core, so each API process keeps its own processor-only cache "
            f"({rel.at['processor_cache']}); the cache type ({req.cache_type}) has no effect",
        )
    if pc.layout != "disabled":
        add_finding(
            findings,
            req,
            Severity.info,
            "vllm-processor-cache-host",
            f"the processor cache can take {pc.host_bytes:,} B of host RAM ({pc.layout}: "
            f"{pc.engine_core_bytes:,} B in the engine core, {pc.api_processes} × {pc.api_process_bytes:,} B in the "
            f"API processes including the render-only cache, {pc.shm_bytes:,} B in /dev/shm)",
        )
    if req.host_memory is not None and pc.host_bytes > req.host_memory:
        add_finding(
            findings,
            req,
            Severity.error,
            "vllm-host-memory-exceeded",
            f"the processor cache can take {pc.host_bytes:,} B of host RAM, more than the {req.host_memory:,} B "
            "available; lower --mm-processor-cache-gb (each API process holds its own copies)",
            "host_memory",
        )
    elif req.host_memory is None and pc.host_bytes > LARGEST_HOST_MEMORY_BYTES:
        add_finding(
            findings,
            req,
            Severity.error,
            "vllm-host-memory-exceeded",
            f"the processor cache can take {pc.host_bytes:,} B of host RAM, more than one host has "
            f"({largest_host()}); lower --mm-processor-cache-gb (each API process holds its own copies)",
            "mm_processor_cache_gb",
        )
    if req.shm_size is not None and pc.shm_bytes > req.shm_size:
        add_finding(
            findings,
            req,
            Severity.error,
            "vllm-shm-exceeded",
            f"the shm processor cache needs a {pc.shm_bytes:,} B segment in /dev/shm, which has {req.shm_size:,} B; "
            "lower --mm-processor-cache-gb or enlarge /dev/shm (docker --shm-size)",
            "shm_size",
        )

    # encoder cache (GPU, tokens)
    enc = encoder_cache(findings, req, facts, pc)

    # GPU decode pool
    pool_json = _decode_pool(findings, req, facts, pc)
    processing = None
    if req.model is not None:
        proc = item_bytes.of_request(req)
        processing = {
            "family": proc.family,
            "device_normalize": proc.device_normalize,
            "model_dtype": proc.model_dtype,
            "pixel_dtype": proc.pixel_dtype,
            "pixel_bytes": proc.pixel_bytes,
            "why": proc.why,
            "at": rel.at["mm_device_do_normalize"],
        }
    return VllmPlan(rel.version, req.release_source, pc, enc, pool_json, findings, processing)


def _dp_findings(findings: list[Finding], req: VllmRequest, facts: dict[str, Any]) -> None:
    dp = req.dp
    if dp.external_lb and dp.hybrid_lb:
        add_finding(
            findings,
            req,
            Severity.error,
            "vllm-dp-lb-conflict",
            "vLLM refuses --data-parallel-hybrid-lb together with --data-parallel-external-lb; enable only one",
            "data_parallel_hybrid_lb",
        )
    if dp.external:
        if dp.rank is None:
            add_finding(
                findings,
                req,
                Severity.error,
                "vllm-external-lb-needs-rank",
                "vLLM refuses this: '--data-parallel-external-lb requires a data-parallel rank'; set "
                "--data-parallel-rank",
                "data_parallel_external_lb",
            )
        if dp.size_local not in (1, None):
            add_finding(
                findings,
                req,
                Severity.error,
                "vllm-external-lb-size-local",
                f"vLLM refuses this: an external data-parallel rank requires --data-parallel-size-local 1; got "
                f"{dp.size_local}",
                "data_parallel_size_local",
            )
        if dp.size > 1 and facts.get("moe") is False:
            add_finding(
                findings,
                req,
                Severity.error,
                "vllm-external-lb-dense",
                "vLLM refuses this: 'Non-MoE models do not support external data parallel mode'; launch independent "
                "vLLM instances without --data-parallel-* arguments",
                "data_parallel_rank",
            )
    elif dp.hybrid_lb and dp.size_local is None:
        add_finding(
            findings,
            req,
            Severity.error,
            "vllm-hybrid-lb-size-local",
            "vLLM refuses this: '--data-parallel-hybrid-lb requires --data-parallel-size-local'",
            "data_parallel_hybrid_lb",
        )
    for name, value in (("data_parallel_size", dp.size), ("tensor_parallel_size", req.tp)):
        if value < 1:
            add_finding(
                findings,
                req,
                Severity.error,
                "parallel-not-positive",
                f"--{name.replace('_', '-')} {value}: vLLM needs at least 1",
                name,
            )
    if dp.api_server_count is not None and dp.api_server_count < 0:
        add_finding(
            findings,
            req,
            Severity.error,
            "vllm-api-server-count-negative",
            f"--api-server-count {dp.api_server_count}: vLLM needs 0 (headless) or more",
            "api_server_count",
        )


def _decode_pool(
    findings: list[Finding], req: VllmRequest, facts: dict[str, Any], pc: processor_cache.ProcessorCache
) -> dict[str, Any] | None:
    total = 0 if req.ipc_gb is None else req.ipc_gb.bytes
    requests = decode_requests(req, [i for i in req.items if isinstance(i, Video)])
    pool = gpu_pool.plan(total, pc.api_processes, requests, gpu_video_backend=req.gpu_video_backend)
    if pool is None:
        return None
    out = asdict(pool)
    out["items"] = [asdict(i) for i in pool.items]
    per_token = kv_bytes_per_token(req)
    out["kv_bytes_per_token"] = out["kv_tokens_min"] = out["kv_tokens_max"] = None  # unknown without a KV shape
    if per_token is not None:
        out["kv_bytes_per_token"] = per_token
        out["kv_tokens_min"], out["kv_tokens_max"] = gpu_pool.kv_tokens(
            pool.kv_reserved_bytes, per_token, req.block_size
        )
        add_finding(
            findings,
            req,
            Severity.info,
            "vllm-kv-reservation",
            f"every GPU worker takes {pool.kv_reserved_bytes:,} B out of its KV cache for the decode pool "
            f"({req.release.at.get('kv_reservation', '')}): {out['kv_tokens_min']:,}-{out['kv_tokens_max']:,} tokens "
            f"at {per_token:,} B per token",
        )
    if pool.floors_to_zero:
        add_finding(
            findings,
            req,
            Severity.error,
            "vllm-gpu-pool-floors-to-zero",
            f"--mm-ipc-gpu-memory-gb {req.ipc_gb.text if req.ipc_gb else ''} is {total:,} B, which split over "
            f"{pool.api_processes} API processes is 0 B each: vLLM fails at start-up with 'total_bytes must be "
            f"positive, got 0'; give at least {smallest_gib(pool.api_processes)} (or 0 to disable it)",
            "mm_ipc_gpu_memory_gb",
        )
    else:
        for item in pool.items:
            if not item.fits:
                add_finding(
                    findings,
                    req,
                    Severity.error,
                    "vllm-decode-request-too-large",
                    f"{item.item}: decoding it asks for {item.bytes:,} B, more than one API process's share "
                    f"({pool.bytes_per_process:,} B): vLLM fails the request ('Multimodal GPU decode requested "
                    f"{item.bytes} bytes, which exceeds the total pool size'); raise --mm-ipc-gpu-memory-gb to at "
                    f"least {_gib_for(item.bytes * pool.api_processes)}",
                    "mm_ipc_gpu_memory_gb",
                )
    if not req.gpu_video_backend:
        add_finding(
            findings,
            req,
            Severity.warning,
            "vllm-gpu-pool-unused",
            "only the PyNvVideoCodec video backend decodes on the GPU and uses this pool, yet vLLM still takes it "
            'out of every worker\'s KV cache; set --media-io-kwargs \'{"video": {"video_backend": '
            '"pynvvideocodec"}}\' or drop --mm-ipc-gpu-memory-gb',
            "mm_ipc_gpu_memory_gb",
        )
    return out


def decode_requests(req: VllmRequest, videos: Sequence[Video]) -> tuple[gpu_pool.DecodeRequest, ...]:
    """What decoding each video asks of the GPU decode pool: the frames the launch's loader samples
    (pynvvideocodec as codec or loader; its default 32 where the loader is not modelled) × H × W × 3.

    Raises:
        qwen.ResizeError: the loader fails on a video (too few frames).
    """
    try:
        decoder = video_loader(req, req.model.family.name if req.model else "")
    except vv.NotModelled:
        decoder = vv.Loader("opencv")
    return tuple(gpu_pool.DecodeRequest(v.label, vv.loader_frames(decoder, v), v.width, v.height) for v in videos)


def kv_bytes_per_token(req: VllmRequest) -> int | None:
    """One token's KV bytes on one GPU worker, from a model directory's attention shape (MHA/GQA): ``layers ×
    max(1, kv_heads // tp) × (head_dim + v_head_dim) × dtype`` (``v1/kv_cache_interface.py:597-605``); None
    without a shape (a family name) or for another attention."""
    kv = req.model.kv if req.model else None
    if kv is None or kv.attention != "mha" or not kv.kv_heads or not kv.head_dim or not kv.v_head_dim:
        return None
    return kv.layers * max(1, kv.kv_heads // max(1, req.tp)) * (kv.head_dim + kv.v_head_dim) * req.kv_dtype_bytes


def _gib_for(nbytes: int) -> str:
    with localcontext() as ctx:
        ctx.prec, ctx.rounding = 4, ROUND_CEILING
        value = +(Decimal(nbytes) / Decimal(GiB))
    while bytes_of(float(value)) < nbytes:
        value = value.next_plus()
    return f"{value:g}"


def dumps(plan: VllmPlan) -> str:
    """The ``vllm`` object as JSON text (for tests and debugging)."""
    return json.dumps(plan.to_json(), indent=2)


def request_from_reading(
    reading: Any,
    release: Release,
    *,
    release_source: str = "newest",
    model: Model | None = None,
    items: tuple[Item, ...] = (),
    gpu: eb.Gpu | None = None,
    host_memory: int | None = None,
    shm_size: int | None = None,
) -> VllmRequest:
    """The plan request of a launch command as ``args.read`` parsed it (``reading``)."""
    from mmpool_cli.engines.vllm.args import data_parallel

    media = reading.get("media_io_kwargs") or {}
    video = media.get("video") if isinstance(media, dict) else None
    backend = video.get("video_backend") or video.get("backend") if isinstance(video, dict) else None
    limits = reading.get("limit_mm_per_prompt") or {}
    mm_kwargs = reading.get("mm_processor_kwargs") or {}
    kv_dtype = str(reading.get("kv_cache_dtype") or "auto")
    origins = {dest: s.origin for dest, s in reading.settings.items()}
    return VllmRequest(
        release=release,
        release_source=release_source,
        cache_gb=reading.get("mm_processor_cache_gb"),
        cache_type=reading.get("mm_processor_cache_type", "lru"),
        shm_max_object_mb=reading.get("mm_shm_cache_max_object_size_mb", 128),
        ipc_gb=reading.get("mm_ipc_gpu_memory_gb"),
        dp=data_parallel(reading),
        tp=reading.get("tensor_parallel_size", 1),
        max_model_len=reading.get("max_model_len"),
        max_num_batched_tokens=reading.get("max_num_batched_tokens"),
        max_num_seqs=reading.get("max_num_seqs"),
        performance_mode=reading.get("performance_mode", "balanced"),
        chunked_prefill=reading.get("enable_chunked_prefill") is not False,
        disable_chunked_mm_input=bool(reading.get("disable_chunked_mm_input", False)),
        limit_mm_per_prompt=limits if isinstance(limits, dict) else {},
        gpu=gpu,
        host_memory=host_memory,
        shm_size=shm_size,
        model=model,
        items=items,
        gpu_video_backend=backend == "pynvvideocodec",
        video_kwargs=video if isinstance(video, dict) else {},
        mm_processor_kwargs=mm_kwargs if isinstance(mm_kwargs, dict) else {},
        device_normalize=reading.get("mm_device_do_normalize"),
        dtype=reading.get("dtype"),
        video_pruning_rate=reading.get("video_pruning_rate"),
        kv_dtype_bytes=1 if kv_dtype.startswith("fp8") else 2,
        block_size=reading.get("block_size") or 16,
        origins=origins,
    )
