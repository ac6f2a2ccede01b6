"""The model families mmpool knows: whether SGLang 0.5.23 pools their features, and their processor settings.

Settings are the checkpoints' values (``preprocessor_config.json``); ``features`` turns them into
bytes. Sources: ``shared/docs/feature-sizes.md`` §1-§6. Pure core: standard library only.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from fractions import Fraction
from types import MappingProxyType
from typing import Any

from mmpool_cli.errors import MmpoolError
from mmpool_cli.workload.items import quote_clipped


class FamilyError(MmpoolError):
    """An unknown family, or a setting or item the family does not take."""


@dataclass(frozen=True)
class Family:
    """One model family: its CLI name, modalities and processor settings (the engine says whether it is pooled)."""

    name: str
    title: str
    modalities: tuple[str, ...]
    model_types: tuple[str, ...]
    # Why the features skip the pool (not pooled), or the tensor and dtype that enter it (pooled).
    note: str
    settings: MappingProxyType[str, Any] = field(default_factory=lambda: MappingProxyType({}))


def _settings(**values: Any) -> MappingProxyType[str, Any]:
    return MappingProxyType(values)


_QWEN2 = _settings(
    patch_size=14,
    merge_size=2,
    temporal_patch_size=2,
    min_pixels=3136,
    max_pixels=12_845_056,
    # The checkpoints (Qwen/Qwen2-VL-*, Qwen/Qwen2.5-VL-*) ship no video_preprocessor_config.json and no
    # processor_config.json, so transformers builds Qwen2VLVideoProcessor from preprocessor_config.json
    # (video_processing_utils.py:366-368, 411-412): its flat min_pixels / max_pixels, not the class's
    # 128·28² / 768·28² (video_processing_qwen2_vl.py:112-121). SGLang's own pre-resize keeps every frame
    # inside the class bounds with its defaults, not with VIDEO_MAX_PIXELS lowered (qwen_vl.py:274-279).
    video_patch_size=14,
    video_merge_size=2,
    video_temporal_patch_size=2,
    video_min_pixels=3136,
    video_max_pixels=12_845_056,
    video_volume=False,
    video_cap_pixels_per_frame=False,
    video_max_video_tokens=128_000,
    max_frames=None,
)

FAMILIES: dict[str, Family] = {
    f.name: f
    for f in (
        Family(
            "qwen2-vl",
            "Qwen2-VL",
            ("image", "video"),
            ("qwen2_vl",),
            "pixel_values / pixel_values_videos, float32 on the GPU",
            _QWEN2,
        ),
        Family(
            "qwen2.5-vl",
            "Qwen2.5-VL",
            ("image", "video"),
            ("qwen2_5_vl",),
            "pixel_values / pixel_values_videos, float32 on the GPU",
            _QWEN2,
        ),
        Family(
            "qwen3-vl",
            "Qwen3-VL",
            ("image", "video"),
            ("qwen3_vl", "qwen3_vl_moe"),
            "pixel_values / pixel_values_videos, float32 on the GPU",
            _settings(
                patch_size=16,
                merge_size=2,
                temporal_patch_size=2,
                min_pixels=65_536,
                max_pixels=16_777_216,
                # Qwen/Qwen3-VL-*'s video_preprocessor_config.json: Qwen3VLVideoProcessor, its size
                video_patch_size=16,
                video_merge_size=2,
                video_temporal_patch_size=2,
                video_min_pixels=4096,
                video_max_pixels=25_165_824,
                video_volume=True,
                video_cap_pixels_per_frame=False,
                video_max_video_tokens=768,
                max_frames=None,
            ),
        ),
        Family(
            "gemma3",
            "Gemma 3",
            ("image",),
            ("gemma3",),
            "pixel_values [1 + crops, 3, 896, 896], float32 on the GPU",
            _settings(
                image_size=896,
                pan_and_scan=False,
                pan_and_scan_min_crop_size=256,
                pan_and_scan_max_num_crops=4,
                pan_and_scan_min_ratio_to_activate=Fraction("1.2"),
            ),
        ),
        Family(
            "llama4",
            "Llama 4",
            ("image",),
            ("llama4",),
            "pixel_values [tiles, 3, 336, 336], bfloat16 on the GPU",
            _settings(tile_size=336, max_patches=16),
        ),
        Family(
            "kimi-k2.5",
            "Kimi-K2.5",
            ("image",),
            ("kimi_k25",),
            "pixel_values [patches, 3, 14, 14], float32 on the GPU (SGLang's own preprocessing)",
            _settings(patch_size=14, merge_size=2, in_patch_limit=16_384, patch_limit_on_one_side=512),
        ),
        Family(
            "internvl",
            "InternVL 2.5 / 3",
            ("image", "video"),
            ("internvl_chat", "internvl", "interns1"),
            "SGLang's InternVL processor builds its items itself and never wraps them for the pool",
        ),
        Family(
            "llava-onevision",
            "LLaVA / LLaVA-NeXT / LLaVA-OneVision",
            ("image", "video"),
            ("llava_onevision", "llava_qwen", "llava", "llava_next"),
            "SGLang's LLaVA processor emits float16 numpy arrays on the CPU",
        ),
        Family(
            "minicpm-v",
            "MiniCPM-V / MiniCPM-o",
            ("image", "video", "audio"),
            ("minicpmv", "minicpmo"),
            "its processor returns a list of CPU tensors and builds its items itself",
        ),
        Family(
            "kimi-vl",
            "Kimi-VL",
            ("image",),
            ("kimi_vl",),
            "its remote-code processor returns CPU tensors",
        ),
        Family(
            "whisper",
            "Whisper-style audio (Whisper, Qwen2-Audio)",
            ("audio",),
            ("whisper", "qwen2_audio"),
            "Whisper feature extractors return CPU tensors even when given device='cuda'",
        ),
    )
}

KNOWN = ", ".join(FAMILIES)


def family(name: str) -> Family:
    """The family called ``name`` (case-insensitive).

    Raises:
        FamilyError: unknown name; the message lists the known families.
    """
    found = FAMILIES.get(name.strip().lower())
    if found is None:
        raise FamilyError(
            f"--model {quote_clipped(name)}: not a known model family or an existing path; known families: {KNOWN} "
            "(or give a Hugging Face model directory or its config.json)"
        )
    return found


def family_of_model_type(model_type: str, where: str) -> Family:
    """The family of a ``config.json`` ``model_type``.

    Raises:
        FamilyError: a model type mmpool has no rules for.
    """
    for f in FAMILIES.values():
        if model_type in f.model_types:
            return f
    types = ", ".join(t for f in FAMILIES.values() for t in f.model_types)
    raise FamilyError(
        f"{where}: model_type {quote_clipped(model_type)} is not one mmpool knows the processor of; known: {types}"
    )


def with_overrides(
    fam: Family, settings: dict[str, Any], overrides: dict[str, Any], flags: dict[str, str]
) -> dict[str, Any]:
    """``settings`` with the command line's processor ``overrides`` applied.

    Raises:
        FamilyError: an override the family's processor does not have (``flags`` names the flag).
    """
    merged = dict(settings)
    for key, value in overrides.items():
        if value is None:
            continue
        if key not in fam.settings:
            raise FamilyError(f"{flags[key]} does not apply to {fam.name}: its processor has no such setting")
        merged[key] = value
        if key == "patch_size" and "video_patch_size" in merged:
            merged["video_patch_size"] = value  # the vision tower's patch: the video processor's too
    return merged
