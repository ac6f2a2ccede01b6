"""A model directory's Qwen processor settings, resolved exactly as transformers 5.19 resolves them.

Which file: ``AutoImageProcessor`` reads ``processor_config.json``'s nested ``"image_processor"``
first, else ``preprocessor_config.json`` (image_processing_base.py:340-347); ``AutoVideoProcessor``
reads the nested ``"video_processor"`` first, else ``video_preprocessor_config.json``, else
``preprocessor_config.json`` (video_processing_utils.py:353, 366-368, 408-412).
Which class: the dict's ``video_processor_type``, else its ``image_processor_type`` with
``ImageProcessor`` → ``VideoProcessor`` where transformers has such a class, else the one of the
model type (video_processing_auto.py:362-391). Which values: what the dict gives, else the
class's own defaults (a Qwen3-VL video config without ``"size"`` gets 131,072-786,432 px,
video_processing_qwen3_vl.py:114); the Qwen2-VL classes take flat ``min_pixels``/``max_pixels``
over ``size`` (image_processing_qwen2_vl.py:109-118, video_processing_qwen2_vl.py:112-121), the
Qwen3-VL video class ignores them. Keyword arguments the server passes to
``AutoProcessor.from_pretrained`` replace the dict's keys before that (from_dict,
video_processing_utils.py:434). Pure core: standard library only.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mmpool_cli.errors import MmpoolError
from mmpool_cli.workload.items import quote_clipped

PROCESSOR = "processor_config.json"
PREPROCESSOR = "preprocessor_config.json"
VIDEO_PREPROCESSOR = "video_preprocessor_config.json"


class ProcessorConfigError(MmpoolError):
    """A processor configuration transformers cannot build the processor from."""


@dataclass(frozen=True)
class QwenClass:
    """One transformers Qwen processor class: its defaults and how it reads its bounds."""

    name: str
    min_pixels: int  # size.shortest_edge
    max_pixels: int  # size.longest_edge
    patch_size: int
    temporal_patch_size: int
    merge_size: int
    flat_bounds: bool  # its __init__ takes min_pixels / max_pixels over size
    volume: bool  # its resize bounds the T·H·W volume, not each frame
    max_video_tokens: int = 0  # a video class's default for cap_pixels_per_frame


_IMAGE = QwenClass("Qwen2VLImageProcessor", 56 * 56, 28 * 28 * 1280, 14, 2, 2, True, False)
VIDEO_CLASSES = {
    c.name: c
    for c in (
        QwenClass("Qwen2VLVideoProcessor", 128 * 28 * 28, 28 * 28 * 768, 14, 2, 2, True, False, 128000),
        QwenClass("Qwen3VLVideoProcessor", 128 * 32 * 32, 32 * 32 * 768, 16, 2, 2, False, True, 768),
    )
}
_IMAGE_NAMES = ("Qwen2VLImageProcessor", "Qwen2VLImageProcessorFast", "Qwen2VLImageProcessorPil")
# video_processing_auto.py VIDEO_PROCESSOR_MAPPING_NAMES; image_processing_auto.py maps all three to Qwen2-VL's
_VIDEO_OF_MODEL_TYPE = {
    "qwen2_vl": "Qwen2VLVideoProcessor",
    "qwen2_5_vl": "Qwen2VLVideoProcessor",
    "qwen3_vl": "Qwen3VLVideoProcessor",
    "qwen3_vl_moe": "Qwen3VLVideoProcessor",
}


@dataclass(frozen=True)
class Dicts:
    """The image and video processor dicts transformers loads, and the file each came from (None: none)."""

    image: dict[str, Any]
    image_from: str | None
    video: dict[str, Any]
    video_from: str | None


def processor_dicts(directory: Path, read_json: Callable[[Path], dict[str, Any]]) -> Dicts:
    """The dicts ``AutoImageProcessor`` and ``AutoVideoProcessor`` read from ``directory``.

    Raises:
        ProcessorConfigError: a nested processor config that is not a JSON object.
    """
    nested = read_json(directory / PROCESSOR) if (directory / PROCESSOR).is_file() else {}

    def first(key: str, files: tuple[str, ...]) -> tuple[dict[str, Any], str | None]:
        if key in nested:
            value = nested[key]
            if not isinstance(value, dict):
                raise ProcessorConfigError(f"{directory / PROCESSOR}: {key!r} is not a JSON object")
            return value, f"{directory / PROCESSOR} ({key})"
        for name in files:
            if (directory / name).is_file():
                return read_json(directory / name), str(directory / name)
        return {}, None

    image, image_from = first("image_processor", (PREPROCESSOR,))
    video, video_from = first("video_processor", (VIDEO_PREPROCESSOR, PREPROCESSOR))
    return Dicts(image, image_from, video, video_from)


def video_class(model_type: str, video: dict[str, Any], where: str) -> QwenClass:
    """The video processor class ``AutoVideoProcessor`` builds from ``video`` for ``model_type``.

    Raises:
        ProcessorConfigError: a class mmpool has no rules for.
    """
    name = video.get("video_processor_type")
    if name is None and isinstance(video.get("image_processor_type"), str):
        inferred = video["image_processor_type"].replace("ImageProcessor", "VideoProcessor")
        name = inferred if inferred in VIDEO_CLASSES else None
    name = name if name is not None else _VIDEO_OF_MODEL_TYPE.get(model_type)
    if name not in VIDEO_CLASSES:
        raise ProcessorConfigError(
            f"{where}: video_processor_type {quote_clipped(str(name))} is not a video processor mmpool has the "
            f"rules of; known: {', '.join(VIDEO_CLASSES)}"
        )
    return VIDEO_CLASSES[str(name)]


def _int(value: Any, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ProcessorConfigError(f"{where}: expected a positive integer, got {quote_clipped(repr(value))}")
    return value


def _bounds(cls: QwenClass, cfg: dict[str, Any], where: str) -> tuple[int, int]:
    size = cfg.get("size")
    if size is None:
        low: Any = cls.min_pixels
        high: Any = cls.max_pixels
    elif isinstance(size, dict):
        low, high = size.get("shortest_edge"), size.get("longest_edge")
    else:
        raise ProcessorConfigError(f"{where}: size must be an object with shortest_edge and longest_edge")
    if cls.flat_bounds:
        low = cfg["min_pixels"] if cfg.get("min_pixels") is not None else low
        high = cfg["max_pixels"] if cfg.get("max_pixels") is not None else high
    if low is None or high is None:
        raise ProcessorConfigError(
            f"{where}: size has no {'shortest_edge' if low is None else 'longest_edge'}, so {cls.name} fails on "
            "every item ('size dict must contain shortest_edge and longest_edge'); give both"
        )
    return _int(low, f"{where}: size.shortest_edge"), _int(high, f"{where}: size.longest_edge")


def _take(cls: QwenClass, cfg: dict[str, Any], key: str, where: str) -> int:
    value = cfg.get(key)
    return int(getattr(cls, key)) if value is None else _int(value, f"{where}: {key}")


def qwen_settings(model_type: str, dicts: Dicts, kwargs: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The sizing settings of a Qwen-VL directory's processors, ``kwargs`` passed as the server passes them.

    Raises:
        ProcessorConfigError: values transformers refuses or a class mmpool has no rules for.
    """
    extra = dict(kwargs or {})
    image = {**dicts.image, **extra}
    video = {**dicts.video, **extra}
    iw = dicts.image_from or "the image processor's defaults"
    vw = dicts.video_from or "the video processor's defaults"
    vcls = video_class(model_type, dicts.video, vw)
    image_min, image_max = _bounds(_IMAGE, image, iw)
    video_min, video_max = _bounds(vcls, video, vw)
    for cfg, where in ((image, iw), (video, vw)):
        if cfg.get("do_resize") is False:
            raise ProcessorConfigError(
                f"{where}: do_resize false: mmpool has the rules of the resizing processors only"
            )
    cap = video.get("cap_pixels_per_frame")
    if cap is not None and not isinstance(cap, bool):
        raise ProcessorConfigError(f"{vw}: cap_pixels_per_frame must be true or false, got {quote_clipped(repr(cap))}")
    return {
        "patch_size": _take(_IMAGE, image, "patch_size", iw),
        "merge_size": _take(_IMAGE, image, "merge_size", iw),
        "temporal_patch_size": _take(_IMAGE, image, "temporal_patch_size", iw),
        "min_pixels": image_min,
        "max_pixels": image_max,
        "video_patch_size": _take(vcls, video, "patch_size", vw),
        "video_merge_size": _take(vcls, video, "merge_size", vw),
        "video_temporal_patch_size": _take(vcls, video, "temporal_patch_size", vw),
        "video_min_pixels": video_min,
        "video_max_pixels": video_max,
        "video_volume": vcls.volume,
        # None: transformers 5.19 warns and keeps the uncapped resize (video_processing_qwen2_vl.py _preprocess)
        "video_cap_pixels_per_frame": bool(cap),
        "video_max_video_tokens": _take(vcls, video, "max_video_tokens", vw),
    }


def check_image_class(dicts: Dicts) -> None:
    """Refuse an image processor class other than Qwen2-VL's, whose rules mmpool has.

    Raises:
        ProcessorConfigError: another ``image_processor_type``.
    """
    name = dicts.image.get("image_processor_type")
    if name is not None and name not in _IMAGE_NAMES:
        raise ProcessorConfigError(
            f"{dicts.image_from}: image_processor_type {quote_clipped(str(name))} is not an image processor mmpool "
            f"has the rules of; known: {', '.join(_IMAGE_NAMES)}"
        )
