"""The plan of a vLLM launch's multimodal memory: processor cache, encoder cache, GPU decode pool.

``make_plan`` turns a ``VllmRequest`` (what the flags or a launch command say, the model and the
items of one request) into a ``VllmPlan`` whose ``to_json`` is the ``vllm`` object of mmpool's JSON
output, with every finding it has. Pure core: standard library only.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from decimal import ROUND_CEILING, Decimal, localcontext
from pathlib import Path
from typing import Any, Literal

from mmpool_cli.core.findings import Finding, Severity
from mmpool_cli.engines.vllm import encoder_budget as eb
from mmpool_cli.engines.vllm import gpu_pool, processor_cache
from mmpool_cli.engines.vllm import video as vv
from mmpool_cli.engines.vllm.gib import GiB, GibValue, bytes_of
from mmpool_cli.engines.vllm.versions import Release
from mmpool_cli.workload import qwen
from mmpool_cli.workload.features import _qwen_params
from mmpool_cli.workload.hf import Model, _read_json, _text_config
from mmpool_cli.workload.items import Image, Item, Video

MiB = 1 << 20
SCHEMA_VERSION = 1
DEFAULT_CACHE_GB = 4
GRID_THW_BYTES = 24  # image_grid_thw / video_grid_thw: 3 int64 per item, part of the item's nbytes
QWEN_VERSION = {"qwen2-vl": 2, "qwen2.5-vl": 2, "qwen3-vl": 3}
# checkpoint values where no config.json is given: context length and embedding elements per token
FAMILY_DEFAULTS = {
    "qwen2-vl": {"max_model_len": 32_768, "embed_elements": 3584},
    "qwen2.5-vl": {"max_model_len": 128_000, "embed_elements": 3584},
    "qwen3-vl": {"max_model_len": 262_144, "embed_elements": 4096 * 4},  # out_hidden_size × (1 + 3 deepstack)
}
H200 = eb.Gpu(150_754_820_096, "NVIDIA H200", (9, 0))  # torch's total_memory of an H200 (143,771 MiB)


@dataclass(frozen=True)
class VllmRequest:
    """Everything a vLLM plan depends on; ``None`` means vLLM's default."""

    release: Release
    release_source: str = "newest"
    cache_gb: GibValue | None = None
    cache_type: Literal["lru", "shm"] = "lru"
    shm_max_object_mb: int = 128
    ipc_gb: GibValue | None = None
    dp: processor_cache.DataParallel = field(default_factory=processor_cache.DataParallel)
    tp: int = 1
    max_model_len: int | None = None
    max_num_batched_tokens: int | None = None
    max_num_seqs: int | None = None
    performance_mode: str = "balanced"
    chunked_prefill: bool = True
    disable_chunked_mm_input: bool = False
    limit_mm_per_prompt: dict[str, Any] = field(default_factory=dict)
    gpu: eb.Gpu | None = None
    host_memory: int | None = None
    shm_size: int | None = None
    model: Model | None = None
    items: tuple[Item, ...] = ()
    gpu_video_backend: bool = False
    video_kwargs: dict[str, Any] = field(default_factory=dict)  # the "video" of --media-io-kwargs
    video_loader_env: str | None = None  # VLLM_VIDEO_LOADER_BACKEND
    mm_processor_kwargs: dict[str, Any] = field(default_factory=dict)
    video_pruning_rate: float | None = None
    kv_dtype_bytes: int = 2
    block_size: int = 16
    origins: dict[str, str] = field(default_factory=dict)  # where each flag was written (check)


@dataclass
class VllmPlan:
    """The computed figures and findings. ``to_json`` is the ``vllm`` object."""

    version: str
    version_source: str
    processor_cache: processor_cache.ProcessorCache
    encoder_cache: dict[str, Any]
    gpu_decode_pool: dict[str, Any] | None
    findings: list[Finding]

    @property
    def ok(self) -> bool:
        return not any(f.severity is Severity.error for f in self.findings)

    @property
    def status(self) -> str:
        return "ok" if self.ok else "fail"

    def summary_line(self) -> str:
        """One line for a check or validate report."""
        pc, enc = self.processor_cache, self.encoder_cache
        line = f"plan: processor cache {pc.layout}, {pc.api_processes} API process(es)"
        line += f", up to {pc.host_bytes:,} B host RAM"
        if enc["budget_tokens"] is not None:
            line += f"; encoder cache {enc['budget_tokens']:,} tokens"
        if self.gpu_decode_pool is not None:
            line += f"; decode pool {self.gpu_decode_pool['bytes_per_process']:,} B per API process"
        return line

    def to_data(self) -> dict[str, Any]:
        """mmpool's JSON output of a vLLM plan: the status, the ``vllm`` object and every finding."""
        return {
            "schema_version": SCHEMA_VERSION,
            "status": "ok" if self.ok else "fail",
            "engine": "vllm",
            "vllm_version": self.version,
            "vllm": self.to_json(),
            "findings": [
                {"severity": f.severity.value, "code": f.code, "message": f.message, "location": f.location}
                for f in self.findings
            ],
        }

    def to_json(self) -> dict[str, Any]:
        """The ``vllm`` object."""
        return {
            "version": self.version,
            "version_source": self.version_source,
            "processor_cache": asdict(self.processor_cache),
            "encoder_cache": self.encoder_cache,
            "gpu_decode_pool": self.gpu_decode_pool,
        }


def _add(
    findings: list[Finding], req: VllmRequest, severity: Severity, code: str, message: str, subject: str | None = None
) -> None:
    findings.append(Finding(severity, code, message, req.origins.get(subject or ""), subject))


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


def _limits(req: VllmRequest, modalities: tuple[str, ...]) -> dict[str, int]:
    out = {}
    for m in modalities:
        raw = req.limit_mm_per_prompt.get(m)
        if raw is None:
            out[m] = req.release.limit_default
        elif isinstance(raw, dict):
            out[m] = int(raw.get("count", req.release.limit_default))
        else:
            out[m] = int(raw)
    return out


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
            _add(
                findings,
                req,
                Severity.warning,
                "vllm-gib-rounded",
                f"{v.flag} {v.text}: vLLM reads it as the float {v.value!r} and uses {v.bytes:,} B, not the "
                "bytes of the decimal written; write the value the float holds",
                v.flag[2:].replace("-", "_"),
            )
        if v is not None and v.odd_spelling:
            _add(
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
        _add(
            findings,
            req,
            Severity.info,
            "vllm-processor-only-cache",
            f"with {pc.api_processes} API process(es) and DP {req.dp.size} vLLM {rel.version} cannot mirror the "
            f"cache into the engine core, so each API process keeps its own processor-only cache "
            f"({rel.at['processor_cache']}); the cache type ({req.cache_type}) has no effect",
        )
    if pc.layout != "disabled":
        _add(
            findings,
            req,
            Severity.info,
            "vllm-processor-cache-host",
            f"the processor cache can take {pc.host_bytes:,} B of host RAM ({pc.layout}: "
            f"{pc.engine_core_bytes:,} B in the engine core, {pc.api_processes} × {pc.api_process_bytes:,} B in the "
            f"API processes including the render-only cache, {pc.shm_bytes:,} B in /dev/shm)",
        )
    if req.host_memory is not None and pc.host_bytes > req.host_memory:
        _add(
            findings,
            req,
            Severity.error,
            "vllm-host-memory-exceeded",
            f"the processor cache can take {pc.host_bytes:,} B of host RAM, more than the {req.host_memory:,} B "
            "available; lower --mm-processor-cache-gb (each API process holds its own copies)",
            "host_memory",
        )
    if req.shm_size is not None and pc.shm_bytes > req.shm_size:
        _add(
            findings,
            req,
            Severity.error,
            "vllm-shm-exceeded",
            f"the shm processor cache needs a {pc.shm_bytes:,} B segment in /dev/shm, which has {req.shm_size:,} B; "
            "lower --mm-processor-cache-gb or enlarge /dev/shm (docker --shm-size)",
            "shm_size",
        )

    # encoder cache (GPU, tokens)
    enc = _encoder(findings, req, facts, pc)

    # GPU decode pool
    pool_json = _decode_pool(findings, req, facts, pc)
    return VllmPlan(rel.version, req.release_source, pc, enc, pool_json, findings)


def _dp_findings(findings: list[Finding], req: VllmRequest, facts: dict[str, Any]) -> None:
    dp = req.dp
    if dp.external_lb and dp.hybrid_lb:
        _add(
            findings,
            req,
            Severity.error,
            "vllm-dp-lb-conflict",
            "vLLM refuses --data-parallel-hybrid-lb together with --data-parallel-external-lb; enable only one",
            "data_parallel_hybrid_lb",
        )
    if dp.external:
        if dp.rank is None:
            _add(
                findings,
                req,
                Severity.error,
                "vllm-external-lb-needs-rank",
                "vLLM refuses this: '--data-parallel-external-lb requires a data-parallel rank'; set "
                "--data-parallel-rank",
                "data_parallel_external_lb",
            )
        if dp.size_local not in (1, None):
            _add(
                findings,
                req,
                Severity.error,
                "vllm-external-lb-size-local",
                f"vLLM refuses this: an external data-parallel rank requires --data-parallel-size-local 1; got "
                f"{dp.size_local}",
                "data_parallel_size_local",
            )
        if dp.size > 1 and facts.get("moe") is False:
            _add(
                findings,
                req,
                Severity.error,
                "vllm-external-lb-dense",
                "vLLM refuses this: 'Non-MoE models do not support external data parallel mode'; launch independent "
                "vLLM instances without --data-parallel-* arguments",
                "data_parallel_rank",
            )
    elif dp.hybrid_lb and dp.size_local is None:
        _add(
            findings,
            req,
            Severity.error,
            "vllm-hybrid-lb-size-local",
            "vLLM refuses this: '--data-parallel-hybrid-lb requires --data-parallel-size-local'",
            "data_parallel_hybrid_lb",
        )
    for name, value in (("data_parallel_size", dp.size), ("tensor_parallel_size", req.tp)):
        if value < 1:
            _add(
                findings,
                req,
                Severity.error,
                "parallel-not-positive",
                f"--{name.replace('_', '-')} {value}: vLLM needs at least 1",
                name,
            )
    if dp.api_server_count is not None and dp.api_server_count < 0:
        _add(
            findings,
            req,
            Severity.error,
            "vllm-api-server-count-negative",
            f"--api-server-count {dp.api_server_count}: vLLM needs 0 (headless) or more",
            "api_server_count",
        )


def _vision(req: VllmRequest) -> eb.QwenVision | None:
    model = req.model
    if model is None or model.family.name not in QWEN_VERSION:
        return None
    settings = dict(model.settings)
    if model.config_path is None and model.family.name in ("qwen2-vl", "qwen2.5-vl"):
        # the checkpoints ship no video_preprocessor_config.json, so transformers builds the video
        # processor from preprocessor_config.json (video_processing_utils.py): the image bounds, not
        # Qwen2VLVideoProcessor's class defaults; a model directory is read that way by workload.hf
        settings |= {"video_min_pixels": settings["min_pixels"], "video_max_pixels": settings["max_pixels"]}
    return eb.from_params(QWEN_VERSION[model.family.name], _qwen_params(settings, model.family))


def _encoder(
    findings: list[Finding], req: VllmRequest, facts: dict[str, Any], pc: processor_cache.ProcessorCache
) -> dict[str, Any]:
    max_model_len = req.max_model_len if req.max_model_len not in (None, -1) else facts.get("max_model_len")
    if req.max_num_batched_tokens is not None:
        mnbt, mnbt_source = req.max_num_batched_tokens, "flag"
    elif max_model_len is None:
        mnbt, mnbt_source = None, "unknown"
    else:
        gpu = req.gpu or H200
        d = eb.default_batched_tokens(
            req.release.batch_defaults,
            gpu,
            performance_mode=req.performance_mode,
            max_model_len=max_model_len,
            max_num_seqs=req.max_num_seqs,
            chunked_prefill=req.chunked_prefill,
        )
        mnbt, mnbt_source = d.tokens, f"default for {gpu.name}: {d.tier}; {req.performance_mode}"
        if req.gpu is None:
            _add(
                findings,
                req,
                Severity.info,
                "vllm-gpu-assumed",
                f"max_num_batched_tokens defaults by GPU; planned for an {H200.name} ({d.tokens}); give --gpu-memory "
                "and --gpu-name for yours",
            )
    vision = _vision(req)
    out: dict[str, Any] = {
        "budget_tokens": None,
        "max_num_batched_tokens": mnbt,
        "max_num_batched_tokens_source": mnbt_source,
        "max_model_len": max_model_len,
        "max_tokens_per_item": None,
        "per_modality": {},
        "embedding_bytes_per_token": None,
        "budget_bytes": None,
        "items": [],
    }
    if vision is None or mnbt is None or max_model_len is None:
        if req.model is not None:
            _add(
                findings,
                req,
                Severity.info,
                "vllm-encoder-not-modelled",
                f"mmpool counts vLLM's encoder tokens for Qwen2-VL, Qwen2.5-VL and Qwen3-VL only, not "
                f"{req.model.family.title}",
            )
        return out
    limits = _limits(req, ("image", "video"))
    enabled = tuple(m for m in ("image", "video") if limits[m] > 0)
    per = eb.max_tokens_per_item(vision, max_model_len, enabled)
    budget = eb.budget(mnbt, per)
    per_token = facts["embed_elements"] * req.kv_dtype_bytes
    out.update(
        budget_tokens=budget,
        max_tokens_per_item=max(per.values()) if per else 0,
        per_modality=per,
        embedding_bytes_per_token=per_token,
        budget_bytes=budget * per_token,
    )
    if req.disable_chunked_mm_input and per and max(per.values()) > mnbt:
        _add(
            findings,
            req,
            Severity.error,
            "vllm-chunked-mm-input",
            f"vLLM fails at start-up: 'Chunked MM input disabled but max_tokens_per_mm_item ({max(per.values())}) "
            f"is larger than max_num_batched_tokens ({mnbt})'; raise --max-num-batched-tokens",
            "disable_chunked_mm_input",
        )
    unmodelled = _unmodelled(req)
    if unmodelled and req.items:
        _add(
            findings,
            req,
            Severity.info,
            "vllm-item-not-counted",
            f"{unmodelled}, so mmpool does not count the items' embedding tokens",
            "mm_processor_kwargs" if req.mm_processor_kwargs else "video_pruning_rate",
        )
    family = req.model.family.name if req.model else ""
    for item in req.items:
        if unmodelled:
            continue
        try:
            tokens, nbytes = _item_tokens(vision, family, req, item)
        except (qwen.ResizeError, vv.NotModelled) as e:
            _add(findings, req, Severity.info, "vllm-item-not-counted", f"{item.label}: {e}")
            continue
        if tokens is None:
            continue
        fits = tokens <= budget
        out["items"].append({"item": item.label, "tokens": tokens, "fits": fits, "processor_bytes": nbytes})
        modality = "video" if isinstance(item, Video) else "image"
        if modality not in enabled:
            _add(
                findings,
                req,
                Severity.error,
                "vllm-modality-disabled",
                f"{item.label}: --limit-mm-per-prompt sets {modality} to 0, so vLLM refuses every {modality}",
                "limit_mm_per_prompt",
            )
        elif not fits:
            _add(
                findings,
                req,
                Severity.error,
                "vllm-item-exceeds-encoder-cache",
                f"{item.label} has {tokens:,} embedding tokens, more than the encoder cache's {budget:,}: vLLM "
                f"refuses it with HTTP 400 (its message suggests --limit-mm-per-prompt, which does not raise the "
                f"budget); launch with --max-num-batched-tokens {tokens} or more",
                "max_num_batched_tokens",
            )
        if nbytes is not None and pc.layout != "disabled" and nbytes > pc.cache_bytes:
            _add(
                findings,
                req,
                Severity.warning,
                "vllm-cache-item-skipped",
                f"{item.label}: its processed tensors ({nbytes:,} B) are larger than the processor cache "
                f"({pc.cache_bytes:,} B), so vLLM never caches it (a one-time warning); raise --mm-processor-cache-gb "
                "to cache it",
                "mm_processor_cache_gb",
            )
        if nbytes is not None and pc.shm_max_object_bytes is not None and nbytes > pc.shm_max_object_bytes:
            _add(
                findings,
                req,
                Severity.warning,
                "vllm-shm-object-too-large",
                f"{item.label}: about {nbytes:,} B serialized, above the shm cache's object limit "
                f"({pc.shm_max_object_bytes:,} B), so it is never cached; raise --mm-shm-cache-max-object-size-mb",
                "mm_shm_cache_max_object_size_mb",
            )
    _add(
        findings,
        req,
        Severity.info,
        "vllm-encoder-budget",
        f"the encoder cache holds {budget:,} tokens = max(max_num_batched_tokens {mnbt:,}, largest item "
        f"{out['max_tokens_per_item']:,}) ({req.release.at['encoder_cache']}); at {per_token:,} B per token that is "
        f"up to {budget * per_token:,} B of GPU memory per worker",
    )
    return out


def _unmodelled(req: VllmRequest) -> str | None:
    """Why no item's tokens can be counted from the launch alone, or None."""
    if req.mm_processor_kwargs:
        return "--mm-processor-kwargs changes how the model's processor resizes and samples items"
    rate = req.video_pruning_rate
    if rate is not None and rate != 0 and any(isinstance(i, Video) for i in req.items):
        return f"--video-pruning-rate {rate!r} drops video tokens by what the frames show"
    return None


def _loader(req: VllmRequest, family: str) -> vv.Loader:
    return vv.loader(family, req.video_kwargs, req.video_loader_env)


def _item_tokens(v: eb.QwenVision, family: str, req: VllmRequest, item: Item) -> tuple[int | None, int | None]:
    """Embedding tokens and processed bytes (float32 pixels plus the grid) of one item.

    Raises:
        qwen.ResizeError: the processor refuses the item.
        vv.NotModelled: the launch samples videos in a way mmpool does not count.
    """
    row = 3 * v.temporal_patch_size * v.patch_size**2 * 4  # one patch of float32 pixels
    if isinstance(item, Image):
        tokens = eb.image_tokens(v, item.width, item.height)
        return tokens, tokens * v.merge_size**2 * row + GRID_THW_BYTES
    if isinstance(item, Video):
        tokens, _, _, _ = vv.video_tokens(v, family, _loader(req, family), item)
        return tokens, tokens * v.merge_size**2 * row + GRID_THW_BYTES
    return None, None


def _decode_pool(
    findings: list[Finding], req: VllmRequest, facts: dict[str, Any], pc: processor_cache.ProcessorCache
) -> dict[str, Any] | None:
    total = 0 if req.ipc_gb is None else req.ipc_gb.bytes
    # the frames the model's loader decodes (pynvvideocodec as codec or loader); 32 where unknown
    try:
        decoder = _loader(req, req.model.family.name if req.model else "")
    except vv.NotModelled:
        decoder = vv.Loader("opencv")
    requests = tuple(
        gpu_pool.DecodeRequest(i.label, vv.loader_frames(decoder, i), i.width, i.height)
        for i in req.items
        if isinstance(i, Video)
    )
    pool = gpu_pool.plan(total, pc.api_processes, requests, gpu_video_backend=req.gpu_video_backend)
    if pool is None:
        return None
    out = asdict(pool)
    out["items"] = [asdict(i) for i in pool.items]
    kv = req.model.kv if req.model else None
    out["kv_bytes_per_token"] = out["kv_tokens_min"] = out["kv_tokens_max"] = None  # unknown without a KV shape
    if kv is not None and kv.attention == "mha" and kv.kv_heads and kv.head_dim and kv.v_head_dim:
        per_token = (
            kv.layers * max(1, kv.kv_heads // max(1, req.tp)) * (kv.head_dim + kv.v_head_dim) * req.kv_dtype_bytes
        )
        out["kv_bytes_per_token"] = per_token
        out["kv_tokens_min"], out["kv_tokens_max"] = gpu_pool.kv_tokens(
            pool.kv_reserved_bytes, per_token, req.block_size
        )
        _add(
            findings,
            req,
            Severity.info,
            "vllm-kv-reservation",
            f"every GPU worker takes {pool.kv_reserved_bytes:,} B out of its KV cache for the decode pool "
            f"({req.release.at.get('kv_reservation', '')}): {out['kv_tokens_min']:,}-{out['kv_tokens_max']:,} tokens "
            f"at {per_token:,} B per token",
        )
    if pool.floors_to_zero:
        _add(
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
                _add(
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
        _add(
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
        video_pruning_rate=reading.get("video_pruning_rate"),
        kv_dtype_bytes=1 if kv_dtype.startswith("fp8") else 2,
        block_size=reading.get("block_size") or 16,
        origins=origins,
    )
