"""The encoder cache of a vLLM plan: each item's embedding tokens and bytes against the cache's budget.

Pure core: standard library only.
"""

from __future__ import annotations

from typing import Any

from mmpool_cli.core.findings import Finding, Severity
from mmpool_cli.engines.vllm import encoder_budget as eb
from mmpool_cli.engines.vllm import item_bytes as ib
from mmpool_cli.engines.vllm import processor_cache
from mmpool_cli.engines.vllm import video as vv
from mmpool_cli.engines.vllm.request import H200, QWEN_VERSION, VllmRequest, add_finding
from mmpool_cli.workload import qwen
from mmpool_cli.workload.features import _qwen_params
from mmpool_cli.workload.items import Image, Item, Video


def limits_of(req: VllmRequest, modalities: tuple[str, ...]) -> dict[str, int]:
    """Items per prompt of each modality, from --limit-mm-per-prompt or the release's default."""
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


def qwen_vision(req: VllmRequest) -> eb.QwenVision | None:
    """The Qwen vision processor's parameters for the request's model; None for another family."""
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


def encoder_cache(
    findings: list[Finding], req: VllmRequest, facts: dict[str, Any], pc: processor_cache.ProcessorCache
) -> dict[str, Any]:
    """The ``encoder_cache`` object of the plan (budget, each item's tokens), its findings into ``findings``."""
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
            add_finding(
                findings,
                req,
                Severity.info,
                "vllm-gpu-assumed",
                f"max_num_batched_tokens defaults by GPU; planned for an {H200.name} ({d.tokens}); give --gpu-memory "
                "and --gpu-name for yours",
            )
    vision = qwen_vision(req)
    gemma = gemma3_image_tokens(req)
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
    if (vision is None and gemma is None) or mnbt is None or max_model_len is None:
        if req.model is not None:
            add_finding(
                findings,
                req,
                Severity.info,
                "vllm-encoder-not-modelled",
                f"mmpool counts vLLM's encoder tokens for Qwen2-VL, Qwen2.5-VL, Qwen3-VL and Gemma 3 (without "
                f"pan-and-scan) only, not {req.model.family.title}"
                + (" with pan-and-scan" if req.model.family.name == "gemma3" else ""),
            )
        return out
    limits = limits_of(req, ("image", "video"))
    enabled = tuple(m for m in ("image", "video") if limits[m] > 0)
    if vision is not None:
        per = eb.max_tokens_per_item(vision, max_model_len, enabled)
    else:  # Gemma 3: every image is its one crop's tokens (get_num_image_tokens without pan-and-scan)
        per = {"image": gemma} if gemma is not None and "image" in enabled else {}
    budget = eb.budget(mnbt, per)
    # the encoder's outputs are in the model's dtype (the vision tower runs in it), never the KV cache's
    per_token = facts["embed_elements"] * ib.DTYPE_BYTES[ib.of_request(req).model_dtype]
    out.update(
        budget_tokens=budget,
        max_tokens_per_item=max(per.values()) if per else 0,
        per_modality=per,
        embedding_bytes_per_token=per_token,
        budget_bytes=budget * per_token,
    )
    if req.disable_chunked_mm_input and per and max(per.values()) > mnbt:
        add_finding(
            findings,
            req,
            Severity.error,
            "vllm-chunked-mm-input",
            f"vLLM fails at start-up: 'Chunked MM input disabled but max_tokens_per_mm_item ({max(per.values())}) "
            f"is larger than max_num_batched_tokens ({mnbt})'; raise --max-num-batched-tokens",
            "disable_chunked_mm_input",
        )
    unmodelled = unmodelled_why(req)
    if unmodelled and req.items:
        add_finding(
            findings,
            req,
            Severity.info,
            "vllm-item-not-counted",
            f"{unmodelled}, so mmpool does not count the items' embedding tokens",
            "mm_processor_kwargs" if req.mm_processor_kwargs else "video_pruning_rate",
        )
    family = req.model.family.name if req.model else ""
    proc = ib.of_request(req)
    for item in req.items:
        if unmodelled:
            continue
        try:
            if vision is None:
                tokens, nbytes = gemma3_item_tokens(req, item, proc)
            else:
                tokens, nbytes = item_tokens(vision, family, req, item, proc)
        except (qwen.ResizeError, vv.NotModelled) as e:
            add_finding(findings, req, Severity.info, "vllm-item-not-counted", f"{item.label}: {e}")
            continue
        if tokens is None:
            continue
        fits = tokens <= budget
        out["items"].append({"item": item.label, "tokens": tokens, "fits": fits, "processor_bytes": nbytes})
        modality = "video" if isinstance(item, Video) else "image"
        if modality not in enabled:
            add_finding(
                findings,
                req,
                Severity.error,
                "vllm-modality-disabled",
                f"{item.label}: --limit-mm-per-prompt sets {modality} to 0, so vLLM refuses every {modality}",
                "limit_mm_per_prompt",
            )
        elif not fits:
            add_finding(
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
            add_finding(
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
            add_finding(
                findings,
                req,
                Severity.warning,
                "vllm-shm-object-too-large",
                f"{item.label}: about {nbytes:,} B serialized, above the shm cache's object limit "
                f"({pc.shm_max_object_bytes:,} B), so it is never cached; raise --mm-shm-cache-max-object-size-mb",
                "mm_shm_cache_max_object_size_mb",
            )
    add_finding(
        findings,
        req,
        Severity.info,
        "vllm-encoder-budget",
        f"the encoder cache holds {budget:,} tokens = max(max_num_batched_tokens {mnbt:,}, largest item "
        f"{out['max_tokens_per_item']:,}) ({req.release.at['encoder_cache']}); at {per_token:,} B per token that is "
        f"up to {budget * per_token:,} B of GPU memory per worker",
    )
    return out


def unmodelled_why(req: VllmRequest) -> str | None:
    """Why no item's tokens can be counted from the launch alone, or None."""
    if req.mm_processor_kwargs:
        return "--mm-processor-kwargs changes how the model's processor resizes and samples items"
    rate = req.video_pruning_rate
    if rate is not None and rate != 0 and any(isinstance(i, Video) for i in req.items):
        return f"--video-pruning-rate {rate!r} drops video tokens by what the frames show"
    return None


def video_loader(req: VllmRequest, family: str) -> vv.Loader:
    """The video loader the launch uses for ``family`` (--media-io-kwargs, the environment)."""
    return vv.loader(family, req.video_kwargs, req.video_loader_env)


def gemma3_image_tokens(req: VllmRequest) -> int | None:
    """The embedding tokens of every Gemma 3 image under vLLM (one crop's ``image_seq_length``), or None for
    another family or where pan-and-scan is on (the checkpoint's config or ``--mm-processor-kwargs``)."""
    model = req.model
    if model is None or model.family.name != "gemma3" or req.mm_processor_kwargs:
        return None
    crops = ib.gemma3_crops(model.settings)
    return None if crops is None else crops * ib.GEMMA3_IMAGE_TOKENS


def gemma3_item_tokens(req: VllmRequest, item: Item, proc: ib.Processing) -> tuple[int | None, int | None]:
    """Embedding tokens and processed bytes of one Gemma 3 item (images only: the family takes no video)."""
    tokens = gemma3_image_tokens(req)
    if tokens is None or req.model is None or not isinstance(item, Image):
        return None, None
    return tokens, ib.gemma3_item(1, int(req.model.settings["image_size"]), proc)


def item_tokens(
    v: eb.QwenVision, family: str, req: VllmRequest, item: Item, proc: ib.Processing
) -> tuple[int | None, int | None]:
    """Embedding tokens and processed bytes (the pixels as ``proc`` keeps them, plus the grid) of one item.

    Raises:
        qwen.ResizeError: the processor refuses the item.
        vv.NotModelled: the launch samples videos in a way mmpool does not count.
    """
    if isinstance(item, Image):
        tokens = eb.image_tokens(v, item.width, item.height)
        return tokens, ib.qwen_item(v, tokens, proc)
    if isinstance(item, Video):
        tokens, _, _, _ = vv.video_tokens(v, family, video_loader(req, family), item)
        return tokens, ib.qwen_item(v, tokens, proc)
    return None, None
