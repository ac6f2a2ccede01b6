"""A video's frames and embedding tokens as vLLM 0.34.0 counts them for one request.

The loader (``multimodal/media/connector.py:572-586``): ``--media-io-kwargs '{"video":
{"video_backend": ...}}'`` if given, else the one registered for the model's video processor
(``qwen2_vl`` for Qwen2/2.5-VL, ``multimodal/video.py:602-605``; ``qwen3_vl`` for Qwen3-VL,
``multimodal/video.py:362-366``), else ``VLLM_VIDEO_LOADER_BACKEND``
(default ``opencv``). ``VideoMediaIO`` passes ``num_frames`` (default 32, ``media/video.py:94-97``)
and the other ``--media-io-kwargs`` video keys on:

- ``opencv`` and ``pynvvideocodec`` sample ``min(num_frames, total)`` frames, and with ``fps > 0``
  at most ``floor(duration × fps)`` with ``duration = total / source fps``, at least 1
  (``multimodal/video.py:215-238``; the duration: ``video_decoders/opencv.py:128``);
- ``qwen2_vl`` ignores ``num_frames``: ``total / source fps × min(fps, 30)`` with ``fps`` default 2,
  clamped to ``[min_frames 4, max_frames]`` (``max_frames``: ``min(768, total)`` floored to whole
  temporal patches) and to ``total``, floored to whole temporal patches; the frames are the
  distinct indices of ``torch.arange(0, total, total / n)`` in float32, clamped to the last frame
  (``multimodal/video.py:624-656``; a source of one frame gives ``n = 0`` and the request fails);
- ``qwen3_vl`` ignores ``num_frames``: ``int(total / source fps × min(fps, 30))`` with ``fps``
  default 2, clamped to ``[min_frames 4, min(max_frames, 768)]`` and to ``total``
  (``multimodal/video.py:380-399``).

A loader that keeps every frame tells the processor to sample again (``do_sample_frames``,
``multimodal/video.py:181-194``): Qwen3-VL's does, at its own 2 fps within 4 to 768 frames
(``qwen3_vl.py:1494-1536``, transformers' ``Qwen3VLVideoProcessor.sample_frames``); Qwen2/2.5-VL's
never samples (its ``do_sample_frames`` is False and vLLM drops the loader's,
``qwen2_5_vl.py:1222-1231``). The processor then resizes the frames (Qwen2/2.5-VL: each frame
within the video processor's pixel bounds; Qwen3-VL: the T·H·W volume, and fewer than 2 frames
is refused) and pads them to whole temporal patches; the tokens are
``_get_vision_info``'s (``qwen2_vl.py:989-1040``, ``qwen3_vl.py:962-1024``). The source's frame
count is ⌈seconds × fps⌉ of ``--video`` (or its FRAMES) and its frame rate the float of the fps written.
Pure core: standard library only.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from mmpool_cli.engines.vllm.encoder_budget import QwenVision, _tokens
from mmpool_cli.workload import exact as fp
from mmpool_cli.workload import qwen
from mmpool_cli.workload.items import Video

UNIFORM_LOADERS = ("opencv", "pynvvideocodec")
QWEN2_LOADER = "qwen2_vl"
QWEN3_LOADER = "qwen3_vl"
DEFAULT_NUM_FRAMES = 32  # VideoMediaIO(num_frames=32)
QWEN3_FPS = 2  # Qwen3VLVideoBackend.load_bytes(fps=2), Qwen3VLVideoProcessor.fps
QWEN3_MAX_FPS = 30
QWEN3_MIN_FRAMES = 4
QWEN3_MAX_FRAMES = 768


class NotModelled(Exception):
    """A launch whose video sampling mmpool does not count; the message says why."""


@dataclass(frozen=True)
class Loader:
    """vLLM's video loader for a launch and the ``--media-io-kwargs`` video keys it samples by."""

    name: str
    num_frames: int = DEFAULT_NUM_FRAMES
    fps: Fraction | None = None  # None: the loader's default (-1 uniform, 2 for qwen3_vl)
    min_frames: int = QWEN3_MIN_FRAMES
    max_frames: int = QWEN3_MAX_FRAMES
    temporal_patch_size: int = 2  # qwen2_vl's frame multiple


def _int(kwargs: Mapping[str, Any], key: str, default: int) -> int:
    value = kwargs.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int):
        raise NotModelled(f"--media-io-kwargs video {key} {value!r} is not an integer")
    return value


def loader(family: str, video_kwargs: Mapping[str, Any] | None, environ_backend: str | None) -> Loader:
    """The loader a launch uses for ``family`` (``video_kwargs``: the ``video`` of ``--media-io-kwargs``).

    Raises:
        NotModelled: a loader other than opencv, pynvvideocodec and qwen3_vl, or a sampling key
            that is not a number.
    """
    kw = dict(video_kwargs or {})
    own = {"qwen3-vl": QWEN3_LOADER, "qwen2-vl": QWEN2_LOADER, "qwen2.5-vl": QWEN2_LOADER}.get(family)
    name = kw.get("video_backend") or own or environ_backend or "opencv"
    if name not in (*UNIFORM_LOADERS, QWEN2_LOADER, QWEN3_LOADER):
        raise NotModelled(f"vLLM's video loader {str(name)[:40]!r} samples frames in a way mmpool does not count")
    fps = kw.get("fps")
    if fps is not None and (isinstance(fps, bool) or not isinstance(fps, int | float) or fps != fps):
        raise NotModelled(f"--media-io-kwargs video fps {fps!r} is not a number")
    return Loader(
        str(name),
        _int(kw, "num_frames", DEFAULT_NUM_FRAMES),
        None if fps is None else Fraction(fps),
        _int(kw, "min_frames", QWEN3_MIN_FRAMES),
        _int(kw, "max_frames", QWEN3_MAX_FRAMES),
        _int(kw, "temporal_patch_size", 2),
    )


def _trunc(x: Fraction) -> int:
    return fp.floor(x) if x >= 0 else fp.ceil(x)


def _qwen3_count(total: int, source_fps: Fraction, fps: Fraction, min_frames: int, max_frames: int) -> int:
    n = _trunc(fp.mul(fp.div(total, source_fps), fps))
    return min(max(n, min_frames), max_frames, total)


def _qwen2_frames(ld: Loader, video: Video) -> int:
    total, t = video.frames, ld.temporal_patch_size
    if t < 1:
        raise NotModelled(f"--media-io-kwargs video temporal_patch_size {t} is below 1")
    fps = min(Fraction(QWEN3_FPS) if ld.fps is None else ld.fps, Fraction(QWEN3_MAX_FPS))
    top = fp.floor(fp.div(min(min(ld.max_frames, QWEN3_MAX_FRAMES), total), t)) * t
    n: Fraction | int = fp.mul(fp.div(total, fp.f64(video.fps)), fps)
    n = min(max(n, ld.min_frames), top, total)
    n = fp.floor(fp.div(n, t)) * t
    if n <= 0:
        raise qwen.ResizeError(
            f"{video.label}: vLLM's qwen2_vl loader samples {n} frames from its {total} and the request fails "
            "('division by zero'); the video needs more frames"
        )
    step = fp.div(total, n)  # torch.arange(0, total, total / n): float32 values, clamped, read once each
    size = fp.ceil(fp.div(total, step))
    return len({min(fp.floor(fp.f32(fp.mul(step, i))), total - 1) for i in range(size)})


def loader_frames(ld: Loader, video: Video) -> int:
    """Frames the loader decodes from ``video``: the distinct indices of ``compute_frames_index_to_sample``.

    Raises:
        qwen.ResizeError: the loader fails on the video (``qwen2_vl`` with fewer frames than a
            temporal patch).
    """
    total = video.frames
    source_fps = fp.f64(video.fps)
    if ld.name == QWEN2_LOADER:
        return _qwen2_frames(ld, video)
    if ld.name == QWEN3_LOADER:
        fps = min(Fraction(QWEN3_FPS) if ld.fps is None else ld.fps, Fraction(QWEN3_MAX_FPS))
        return _qwen3_count(total, source_fps, fps, ld.min_frames, min(ld.max_frames, QWEN3_MAX_FRAMES))
    n = total
    if ld.num_frames > 0:
        n = min(ld.num_frames, total)
    if ld.fps is not None and ld.fps > 0:
        duration = fp.div(total, source_fps)
        n = min(n, fp.floor(fp.mul(duration, ld.fps)))
    return max(1, n)


def processor_frames(family: str, ld: Loader, video: Video) -> int:
    """Frames that reach the model's video processor after its own sampling, if any."""
    n = loader_frames(ld, video)
    if family == "qwen3-vl" and n == video.frames:  # do_sample_frames: the processor samples at 2 fps
        n = _qwen3_count(video.frames, fp.f64(video.fps), Fraction(QWEN3_FPS), QWEN3_MIN_FRAMES, QWEN3_MAX_FRAMES)
    return n


def video_tokens(v: QwenVision, family: str, ld: Loader, video: Video) -> tuple[int, int, int, int]:
    """``(tokens, frames, height, width)`` of one video: embedding tokens, frames processed, resized frame.

    Raises:
        qwen.ResizeError: the processor refuses the video (aspect ratio above 200; Qwen3-VL with
            fewer than 2 frames).
    """
    frames = processor_frames(family, ld, video)
    if v.version == 3:
        if frames < v.temporal_patch_size:
            raise qwen.ResizeError(
                f"{video.label}: Qwen3-VL's video processor gets {frames} frame(s) and refuses fewer than "
                f"{v.temporal_patch_size} ('t:{frames} must be larger than temporal_factor')"
            )
        h, w = qwen.volume_resize(frames, video.height, video.width, v.unit, v.video_min_pixels, v.video_max_pixels)
    else:
        h, w = qwen.smart_resize(video.height, video.width, v.unit, v.video_min_pixels, v.video_max_pixels)
    return _tokens(v, h, w, frames), frames, h, w
