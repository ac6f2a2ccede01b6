"""vLLM's encoder cache: its budget in tokens, each item's embedding tokens, and the GPU bytes.

The budget is ``max(encoder_cache_size, max_tokens_per_item)`` (``v1/core/encoder_cache_manager.py:
329-376``) with ``encoder_cache_size = max_num_batched_tokens`` (``config/scheduler.py:350-351``).
``max_num_batched_tokens`` defaults by the GPU's memory, name and compute capability and by
``--performance-mode`` (``engine/arg_utils.py:2976-3069, 3196-3262``, the tiers read per release
into ``releases.json``). ``max_tokens_per_item`` is the largest item of every enabled modality
as the model's processing info counts it (``multimodal/encoder_budget.py:72-122``); for Qwen
the image figure ignores the context length and the video figure is bounded by it only for
Qwen2/2.5-VL (``model_executor/models/qwen2_vl.py:980-1190``, ``qwen3_vl.py:962-1070``). An item
above the budget is refused at request time with HTTP 400 (``v1/engine/input_processor.py:626-638``).
Pure core: standard library only.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from mmpool_cli.workload import qwen

GiB = 1 << 30
QWEN2_MAX_FRAMES_PER_VIDEO = 14  # qwen2_vl.py _MAX_FRAMES_PER_VIDEO
QWEN3_DUMMY_VIDEO_FRAMES = 2048  # qwen3_vl.py DUMMY_VIDEO_NUM_FRAMES
MAX_RATIO = 200  # get_image_size_with_most_features avoids aspect ratios above this
MAX_SEQ_LEN = 1 << 24  # bounds the factor search (vLLM's own loop is linear in it)


@dataclass(frozen=True)
class Gpu:
    """The GPU as vLLM's defaults see it: ``torch``'s total memory, its name, its compute capability."""

    memory_bytes: int
    name: str
    capability: tuple[int, int] | None = None


@dataclass(frozen=True)
class BatchDefault:
    """The default ``max_num_batched_tokens`` of ``vllm serve`` on one GPU, and why."""

    tokens: int
    max_num_seqs: int
    tier: str


def default_batched_tokens(
    rules: Mapping[str, Any],
    gpu: Gpu,
    *,
    performance_mode: str = "balanced",
    max_model_len: int,
    max_num_seqs: int | None = None,
    chunked_prefill: bool = True,
) -> BatchDefault:
    """``max_num_batched_tokens`` as ``EngineArgs`` defaults it for the OpenAI server.

    ``rules`` is a release's ``batch_defaults`` (its GPU tiers). Throughput mode doubles the tokens
    (and the default ``max_num_seqs``); without chunked prefill the floor is ``max_model_len``;
    the result is at most ``max_num_seqs × max_model_len``.
    """
    gb10 = rules.get("gb10_capability")
    is_gb10 = gb10 is not None and gpu.capability == tuple(gb10)
    tiers: Sequence[Mapping[str, Any]] = rules["tiers"]
    name = gpu.name.lower()
    for i, tier in enumerate(tiers):
        floor = tier["min_memory_gib"]
        if floor is not None and gpu.memory_bytes < floor * GiB:
            continue
        if any(n in name for n in tier["excluded_names"]) or (tier["excludes_gb10"] and is_gb10):
            continue
        tokens, seqs = tier["server"], rules["server_seqs"][i]
        label = f"{floor} GiB or more" if floor is not None else "other GPUs"
        excluded = [n.upper() for n in tier["excluded_names"]] + (["GB10"] if tier["excludes_gb10"] else [])
        if excluded:
            label += ", not " + "/".join(excluded)
        break
    else:  # the last tier has no condition in every release the tables know
        raise AssertionError("no batch-default tier matched")
    if performance_mode == "throughput":
        tokens *= 2
        seqs *= 2
    if max_num_seqs is not None:
        seqs = max_num_seqs
    if not chunked_prefill:
        tokens = max(max_model_len, tokens)
    tokens = min(seqs * max_model_len, tokens)
    return BatchDefault(tokens, seqs, label)


@dataclass(frozen=True)
class QwenVision:
    """What a Qwen-VL checkpoint's processing info reads: the vision config and the processors' sizes."""

    version: int  # 2 for Qwen2/2.5-VL, 3 for Qwen3-VL
    patch_size: int
    merge_size: int
    temporal_patch_size: int
    min_pixels: int
    max_pixels: int
    video_min_pixels: int
    video_max_pixels: int

    @property
    def unit(self) -> int:
        return self.patch_size * self.merge_size


def from_params(version: int, p: qwen.QwenParams) -> QwenVision:
    """The vision settings of mmpool's Qwen family parameters."""
    return QwenVision(
        version,
        p.patch_size,
        p.merge_size,
        p.temporal_patch_size,
        p.min_pixels,
        p.max_pixels,
        p.video_min_pixels,
        p.video_max_pixels,
    )


def _tokens(v: QwenVision, height: int, width: int, frames: int) -> int:
    padded = frames + (-frames % v.temporal_patch_size)
    grid_t = max(padded // v.temporal_patch_size, 1)
    return grid_t * (height // v.patch_size) * (width // v.patch_size) // v.merge_size**2


def image_tokens(v: QwenVision, width: int, height: int) -> int:
    """One image's embedding tokens (``_get_vision_info`` with the image processor's sizes).

    Raises:
        qwen.ResizeError: the aspect ratio is above 200, which the processor refuses.
    """
    h, w = qwen.smart_resize(height, width, v.unit, v.min_pixels, v.max_pixels)
    return _tokens(v, h, w, 1)


def most_features(v: QwenVision, max_pixels: int) -> tuple[int, int]:
    """``get_image_size_with_most_features``: (width, height) of the largest token count."""
    max_seq_len = max_pixels // (v.unit * v.unit)
    if max_seq_len > MAX_SEQ_LEN:
        raise qwen.ResizeError(
            f"max_pixels {max_pixels}: more than {MAX_SEQ_LEN} tokens per image, which no checkpoint has"
        )
    for seq_len in range(max_seq_len, 0, -1):
        h, w = _closest_factor_pair(seq_len)
        if w <= MAX_RATIO * h:  # width_factor / height_factor <= 200, exactly
            return v.unit * w, v.unit * h
    return v.unit, v.unit


def _closest_factor_pair(n: int) -> tuple[int, int]:
    for d in range(math.isqrt(n), 0, -1):
        if n % d == 0:
            return d, n // d
    return 1, n


def max_tokens_per_item(v: QwenVision, max_model_len: int, modalities: Sequence[str]) -> dict[str, int]:
    """``get_mm_max_tokens_per_item`` for the enabled ``modalities`` (each with one item).

    Qwen2/2.5-VL: the image of most features; the video of that size with the most frames whose
    tokens fit ``max_model_len`` (at least 1, at most 14). Qwen3-VL: the image likewise, the
    video as 2 frames of the video processor's ``longest_edge // temporal_patch_size``.
    """
    width, height = most_features(v, v.max_pixels)
    out: dict[str, int] = {}
    if "image" in modalities:
        out["image"] = _tokens(v, height, width, 1)
    if "video" in modalities:
        if v.version == 3:
            vw, vh = most_features(v, v.video_max_pixels // v.temporal_patch_size)
            rh, rw = _video_resize3(v, vh, vw, 2)
            out["video"] = _tokens(v, rh, rw, 2)
        else:
            per_group = _tokens(v, height, width, 1)
            # _get_max_video_frames: the most frames whose token count stays within max_model_len
            total = max(1, (max_model_len // per_group) * v.temporal_patch_size)
            frames = max(min(total, QWEN2_MAX_FRAMES_PER_VIDEO), 1)
            out["video"] = _tokens(v, height, width, frames)
    return out


def _video_resize3(v: QwenVision, height: int, width: int, frames: int) -> tuple[int, int]:
    """Qwen3-VL's video ``smart_resize`` over the T·H·W volume, as the processing info calls it."""
    return qwen.volume_resize(frames, height, width, v.unit, v.video_min_pixels, v.video_max_pixels)


def budget(max_num_batched_tokens: int, per_item: Mapping[str, int]) -> int:
    """The encoder cache's size in tokens: 0 when every modality is disabled (vLLM builds none)."""
    if not per_item:
        return 0
    return max(max_num_batched_tokens, max(per_item.values()))
