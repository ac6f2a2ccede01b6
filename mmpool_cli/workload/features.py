"""A request's items -> the tensors that enter SGLang 0.5.23's feature pool, with their exact bytes.

One pooled tensor per image and per video (SGLang splits a request's features into one slice
each). Pure core: standard library only.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any, Literal

from mmpool_cli.workload import qwen, tiles, unpooled, video_env
from mmpool_cli.workload.families import Family, FamilyError
from mmpool_cli.workload.items import Audio, Image, Item, Video

DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}
Dtype = Literal["float32", "bfloat16", "float16"]


@dataclass(frozen=True)
class FeatureTensor:
    """One feature tensor of an item: its name, shape, dtype and bytes."""

    item: str
    tensor: str
    shape: list[int]
    dtype: Dtype
    bytes: int


@dataclass(frozen=True)
class Workload:
    """What a request of the given items puts in the pool, for one model."""

    model: str
    family: str
    pooled: bool
    items: list[str]
    tensors: list[FeatureTensor]  # what enters the pool
    request_bytes: int
    unpooled: list[FeatureTensor]  # what a family that is never pooled moves outside the pool
    # the model directory or hub id SGLang launches (--model-path), None for a family name
    model_path: str | None = field(default=None, metadata={"json": False})


def _tensor(item: Item, name: str, shape: tuple[int, ...], dtype: Dtype) -> FeatureTensor:
    numel = 1
    for n in shape:
        numel *= n
    return FeatureTensor(item=item.label, tensor=name, shape=list(shape), dtype=dtype, bytes=numel * DTYPE_BYTES[dtype])


def _qwen_params(s: dict[str, Any], fam: Family) -> qwen.QwenParams:
    return qwen.QwenParams(
        patch_size=s["patch_size"],
        merge_size=s["merge_size"],
        temporal_patch_size=s["temporal_patch_size"],
        min_pixels=s["min_pixels"],
        max_pixels=s["max_pixels"],
        video_min_pixels=s["video_min_pixels"],
        video_max_pixels=s["video_max_pixels"],
        volume_video_resize=s.get("video_volume", fam.name == "qwen3-vl"),
        max_frames=s.get("max_frames"),
        video_total_pixels=s.get("video_total_pixels", qwen.SGLANG_VIDEO_TOTAL_PIXELS),
        video_patch_size=s.get("video_patch_size"),
        video_merge_size=s.get("video_merge_size"),
        video_temporal_patch_size=s.get("video_temporal_patch_size"),
        video_cap_pixels_per_frame=s.get("video_cap_pixels_per_frame", False),
        video_max_video_tokens=s.get("video_max_video_tokens"),
    )


def pooled_tensor(fam: Family, settings: dict[str, Any], item: Item) -> FeatureTensor:
    """The tensor one item puts in the pool, for a pooled family with its ``settings``.

    Raises:
        FamilyError: the family takes no such item.
        ResizeError: the processor refuses the item (e.g. an aspect ratio above 200).
    """
    s = settings
    if fam.name.startswith("qwen"):
        p = _qwen_params(s, fam)
        if isinstance(item, Image):
            return _tensor(item, "pixel_values", qwen.image_shape(item.height, item.width, p), "float32")
        if isinstance(item, Video):
            shape = qwen.video_shape(item.height, item.width, item.frames, item.fps, p)
            return _tensor(item, "pixel_values_videos", shape, "float32")
    elif isinstance(item, Image) and fam.name == "gemma3":
        crops = 0
        if s["pan_and_scan"]:
            crops = tiles.gemma3_crops(
                item.width,
                item.height,
                s["pan_and_scan_min_crop_size"],
                s["pan_and_scan_max_num_crops"],
                s["pan_and_scan_min_ratio_to_activate"],
            )
        size = s["image_size"]
        return _tensor(item, "pixel_values", (1 + crops, 3, size, size), "float32")
    elif isinstance(item, Image) and fam.name == "llama4":
        tile = s["tile_size"]
        n = tiles.llama4_tiles(item.width, item.height, s["max_patches"], tile)
        return _tensor(item, "pixel_values", (n, 3, tile, tile), "bfloat16")
    elif isinstance(item, Image) and fam.name == "kimi-k2.5":
        patch = s["patch_size"]
        n = tiles.kimi_k25_patches(
            item.width, item.height, patch, s["merge_size"], s["in_patch_limit"], s["patch_limit_on_one_side"]
        )
        return _tensor(item, "pixel_values", (n, 3, patch, patch), "float32")
    raise FamilyError(f"{fam.name} takes no {_kind(item)} ({item.label}); it takes {', '.join(fam.modalities)}")


def video_item_bytes(
    fam: Family,
    settings: dict[str, Any],
    width: int,
    height: int,
    frames: int,
    fps: Fraction,
    environ: Mapping[str, str],
    max_frames: int | None = None,
) -> int:
    """The pooled bytes of one video of ``frames`` frames at ``fps`` (the decoder's ``len(vr)``, ``avg_fps``).

    What ``plan --video`` sizes, for any source of videos: SGLang's sampling and pre-resize with
    the ``VIDEO_MAX_PIXELS`` of ``environ`` and the item's ``max_frames``, then the video processor
    of ``settings`` (``hf.resolve``'s, as transformers reads the model directory).

    Raises:
        FamilyError: the family takes no video.
        ResizeError: SGLang or the processor refuses the video (too few frames, aspect ratio over 200).
        MmpoolError: a ``VIDEO_MAX_PIXELS`` SGLang cannot read.
    """
    if not fam.name.startswith("qwen"):
        raise FamilyError(f"{fam.name}: mmpool sizes pooled videos of the Qwen-VL families only")
    s = dict(settings, video_total_pixels=video_env.video_total_pixels(environ))
    if max_frames is not None:
        s["max_frames"] = max_frames
    shape = qwen.video_shape(height, width, frames, fps, _qwen_params(s, fam))
    return shape[0] * shape[1] * DTYPE_BYTES["float32"]


def _kind(item: Item) -> str:
    return "audio" if isinstance(item, Audio) else type(item).__name__.lower()


def workload(model: str, fam: Family, settings: dict[str, Any], items: list[Item], pooled: bool) -> Workload:
    """The pooled tensors of one request of ``items`` (none when the engine does not pool the family).

    Raises:
        FamilyError: an item the family does not take.
        ResizeError: an item the processor refuses.
    """
    for item in items:
        if _kind(item) not in fam.modalities:
            raise FamilyError(f"{fam.name} takes no {_kind(item)} ({item.label}); it takes {', '.join(fam.modalities)}")
    tensors = [pooled_tensor(fam, settings, item) for item in items] if pooled else []
    unpooled = [] if pooled else [t for t in (unpooled_tensor(fam, item, items) for item in items) if t]
    return Workload(
        model=model,
        family=fam.name,
        pooled=pooled,
        items=[item.label for item in items],
        tensors=tensors,
        request_bytes=sum(t.bytes for t in tensors),
        unpooled=unpooled,
    )


def unpooled_tensor(fam: Family, item: Item, request: list[Item]) -> FeatureTensor | None:
    """The feature of one item of a family that is never pooled; None where mmpool has no exact rule."""
    if fam.name == "internvl":
        if isinstance(item, Image):
            n = unpooled.internvl_tiles(item.width, item.height)
        else:
            n = unpooled.INTERNVL_VIDEO_FRAMES
        size = unpooled.INTERNVL_TILE
        return _tensor(item, "pixel_values", (n, 3, size, size), "bfloat16")
    if fam.name == "llava-onevision" and isinstance(item, Image):
        # anyres for a lone image; a request with several images or a video pads each to one patch
        alone = len(request) == 1
        n = unpooled.llava_anyres_patches(item.width, item.height) if alone else 1
        size = unpooled.LLAVA_PATCH
        return _tensor(item, "pixel_values", (n, 3, size, size), "float16")
    if fam.name == "kimi-vl" and isinstance(item, Image):
        n = unpooled.kimi_vl_patches(item.width, item.height)
        return _tensor(item, "pixel_values", (n, 3, unpooled.KIMI_VL_PATCH, unpooled.KIMI_VL_PATCH), "float32")
    if fam.name == "whisper" and isinstance(item, Audio):
        return _tensor(item, "input_features", unpooled.whisper_shape(item.seconds), "float32")
    return None
