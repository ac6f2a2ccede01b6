"""Qwen2-VL, Qwen2.5-VL and Qwen3-VL: resized sizes and pooled bytes, as SGLang 0.5.23 computes them.

Images go straight to the HF image processor (``Qwen2VLImageProcessor.smart_resize``); videos are
sampled and pre-resized by SGLang (``processors/qwen_vl.py``: ``smart_nframes``,
``preprocess_video``) and then resized again by the HF video processor (per frame for Qwen2/2.5,
over the whole T·H·W volume for Qwen3). Every float expression of the reference runs through
``exact`` so the sizes match bit for bit. Pure core: standard library only.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

from mmpool_cli.errors import MmpoolError
from mmpool_cli.workload import exact as fp

FLOAT32_BYTES = 4
CHANNELS = 3
MAX_RATIO = 200

# SGLang 0.5.23 ``qwen_vl.py``: frame sampling and the per-frame pre-resize of videos.
SGLANG_VIDEO_FACTOR = 28  # IMAGE_FACTOR: SGLang pre-resizes with 28 for Qwen3-VL too
SGLANG_FPS = Fraction(2)
SGLANG_MIN_FRAMES = 4
SGLANG_MAX_FRAMES = 768
FRAME_FACTOR = 2
SGLANG_VIDEO_MIN_PIXELS = 128 * 28 * 28
SGLANG_VIDEO_MAX_PIXELS = 768 * 28 * 28
# int(float(os.environ.get("VIDEO_MAX_PIXELS", 128000 * 28 * 28 * 0.9)))
SGLANG_VIDEO_TOTAL_PIXELS = 90_316_800
ENV_VIDEO_TOTAL_PIXELS = "VIDEO_MAX_PIXELS"
# transformers 5.19's max_video_tokens defaults (Qwen2VLVideoProcessor, Qwen3VLVideoProcessor)
QWEN2_MAX_VIDEO_TOKENS = 128000
QWEN3_MAX_VIDEO_TOKENS = 768


@dataclass(frozen=True)
class QwenParams:
    """The processor settings that decide the sizes (checkpoint values, or overrides)."""

    patch_size: int
    merge_size: int
    temporal_patch_size: int
    min_pixels: int
    max_pixels: int
    video_min_pixels: int
    video_max_pixels: int
    volume_video_resize: bool  # Qwen3-VL's video processor resizes the T·H·W volume
    max_frames: int | None = None  # SGLang's video ``max_frames`` (default min(768, frames))
    video_total_pixels: int = SGLANG_VIDEO_TOTAL_PIXELS
    # the video processor's own patch settings, where its config differs from the image processor's
    video_patch_size: int | None = None
    video_merge_size: int | None = None
    video_temporal_patch_size: int | None = None
    # the video processor's cap_pixels_per_frame and max_video_tokens (None: the class's 128000 / 768)
    video_cap_pixels_per_frame: bool = False
    video_max_video_tokens: int | None = None

    @property
    def factor(self) -> int:
        """The side multiple of a resized image: patch size × merge size."""
        return self.patch_size * self.merge_size

    @property
    def video_patch(self) -> tuple[int, int, int]:
        """The video processor's patch size, merge size and temporal patch size."""
        return (
            self.video_patch_size or self.patch_size,
            self.video_merge_size or self.merge_size,
            self.video_temporal_patch_size or self.temporal_patch_size,
        )


class ResizeError(MmpoolError):
    """An input the processor itself refuses (aspect ratio above 200, too few frames)."""


def _check_ratio(height: int, width: int) -> None:
    if max(height, width) > MAX_RATIO * min(height, width):
        raise ResizeError(
            f"{width}x{height}: the aspect ratio is above {MAX_RATIO}, which Qwen's processor refuses "
            "(absolute aspect ratio must be smaller than 200)"
        )


def smart_resize(height: int, width: int, factor: int, min_pixels: int, max_pixels: int) -> tuple[int, int]:
    """HF ``smart_resize`` of the Qwen2-VL image processor: ``(height, width)`` after resizing.

    Both sides become multiples of ``factor`` with the pixel count between the bounds; the float
    steps run exactly as in transformers 5.19.
    Raises:
        ResizeError: the aspect ratio is above 200.
    """
    _check_ratio(height, width)
    h_bar = fp.round_half_even(fp.div(height, factor)) * factor
    w_bar = fp.round_half_even(fp.div(width, factor)) * factor
    if h_bar * w_bar > max_pixels:
        beta = fp.sqrt(fp.div(height * width, max_pixels))
        h_bar = max(factor, fp.floor(fp.div(fp.div(height, beta), factor)) * factor)
        w_bar = max(factor, fp.floor(fp.div(fp.div(width, beta), factor)) * factor)
    elif h_bar * w_bar < min_pixels:
        beta = fp.sqrt(fp.div(min_pixels, height * width))
        h_bar = fp.ceil(fp.div(fp.mul(height, beta), factor)) * factor
        w_bar = fp.ceil(fp.div(fp.mul(width, beta), factor)) * factor
    return h_bar, w_bar


def image_shape(height: int, width: int, p: QwenParams) -> tuple[int, int]:
    """The shape of one image's ``pixel_values``: ``[patches, 3·temporal·patch²]`` (float32)."""
    h, w = smart_resize(height, width, p.factor, p.min_pixels, p.max_pixels)
    patches = (h // p.patch_size) * (w // p.patch_size)
    return patches, CHANNELS * p.temporal_patch_size * p.patch_size**2


def video_frames(total_frames: int, video_fps: Fraction, p: QwenParams) -> int:
    """Frames SGLang samples from a video (``smart_nframes`` with its default 2 fps).

    ``video_fps`` is the container's frame rate as a float holds it.
    Raises:
        ResizeError: the video has fewer than 2 frames to sample.
    """
    min_frames = fp.ceil(fp.div(SGLANG_MIN_FRAMES, FRAME_FACTOR)) * FRAME_FACTOR
    max_default = min(SGLANG_MAX_FRAMES, total_frames) if p.max_frames is None else p.max_frames
    max_frames = fp.floor(fp.div(max_default, FRAME_FACTOR)) * FRAME_FACTOR
    n = fp.mul(fp.div(total_frames, video_fps), SGLANG_FPS)
    n = min(min(max(n, Fraction(min_frames)), Fraction(max_frames)), Fraction(total_frames))
    frames = fp.floor(fp.div(n, FRAME_FACTOR)) * FRAME_FACTOR
    if not FRAME_FACTOR <= frames <= total_frames:
        raise ResizeError(
            f"SGLang samples {frames} frame(s) from a video of {total_frames}, outside "
            f"[{FRAME_FACTOR}, {total_frames}], and fails ('nframes should in interval'); the video needs more frames"
        )
    return frames


def sglang_video_resize(height: int, width: int, frames: int, p: QwenParams) -> tuple[int, int]:
    """SGLang's per-frame pre-resize of a sampled video (``preprocess_video``), factor 28."""
    _check_ratio(height, width)
    min_pixels = SGLANG_VIDEO_MIN_PIXELS
    max_pixels = max(
        min(Fraction(SGLANG_VIDEO_MAX_PIXELS), fp.mul(fp.div(p.video_total_pixels, frames), FRAME_FACTOR)),
        Fraction(fp.floor(fp.mul(min_pixels, fp.f64(Fraction("1.05"))))),
    )
    f = SGLANG_VIDEO_FACTOR
    # SGLang's own copy of smart_resize guards the rounding step, not the floor step
    h_bar = max(f, fp.round_half_even(fp.div(height, f)) * f)
    w_bar = max(f, fp.round_half_even(fp.div(width, f)) * f)
    if h_bar * w_bar > max_pixels:
        beta = fp.sqrt(fp.div(height * width, max_pixels))
        h_bar = fp.floor(fp.div(fp.div(height, beta), f)) * f
        w_bar = fp.floor(fp.div(fp.div(width, beta), f)) * f
    elif h_bar * w_bar < min_pixels:
        beta = fp.sqrt(fp.div(min_pixels, height * width))
        h_bar = fp.ceil(fp.div(fp.mul(height, beta), f)) * f
        w_bar = fp.ceil(fp.div(fp.mul(width, beta), f)) * f
    if h_bar <= 0 or w_bar <= 0:
        raise ResizeError(f"{width}x{height}: SGLang's video resize leaves an empty frame ({w_bar}x{h_bar})")
    return h_bar, w_bar


def volume_resize(
    frames: int, height: int, width: int, factor: int, min_pixels: int, max_pixels: int
) -> tuple[int, int]:
    """HF ``smart_resize`` of the Qwen3-VL video processor: the T·H·W volume within the bounds."""
    if height < factor or width < factor:
        scale = max(fp.div(factor, height), fp.div(factor, width))
        height, width = fp.floor(fp.mul(height, scale)), fp.floor(fp.mul(width, scale))
    _check_ratio(height, width)
    h_bar = fp.round_half_even(fp.div(height, factor)) * factor
    w_bar = fp.round_half_even(fp.div(width, factor)) * factor
    t_bar = fp.round_half_even(fp.div(frames, FRAME_FACTOR)) * FRAME_FACTOR
    if t_bar * h_bar * w_bar > max_pixels:
        beta = fp.sqrt(fp.div(frames * height * width, max_pixels))
        h_bar = max(factor, fp.floor(fp.div(fp.div(height, beta), factor)) * factor)
        w_bar = max(factor, fp.floor(fp.div(fp.div(width, beta), factor)) * factor)
    elif t_bar * h_bar * w_bar < min_pixels:
        beta = fp.sqrt(fp.div(min_pixels, frames * height * width))
        h_bar = fp.ceil(fp.div(fp.mul(height, beta), factor)) * factor
        w_bar = fp.ceil(fp.div(fp.mul(width, beta), factor)) * factor
    return h_bar, w_bar


def video_shape(height: int, width: int, total_frames: int, video_fps: Fraction, p: QwenParams) -> tuple[int, int]:
    """The shape of one video's ``pixel_values_videos``: ``[patches, 3·temporal·patch²]`` (float32)."""
    frames = video_frames(total_frames, video_fps, p)
    h1, w1 = sglang_video_resize(height, width, frames, p)
    patch, merge, temporal = p.video_patch
    factor, low, high = patch * merge, p.video_min_pixels, p.video_max_pixels
    floor_pixels = fp.floor(fp.mul(low, fp.f64(Fraction("1.05"))))  # int(size.shortest_edge * 1.05)
    if p.volume_video_resize:
        if p.video_cap_pixels_per_frame:  # video_processing_qwen3_vl.py resize: a share of longest_edge per frame
            tokens = p.video_max_video_tokens or QWEN3_MAX_VIDEO_TOKENS
            high = max(min(tokens * factor * factor, high // frames), floor_pixels) * frames
        h, w = volume_resize(frames, h1, w1, factor, low, high)
    else:
        if p.video_cap_pixels_per_frame:  # video_processing_qwen2_vl.py resize: a share of 90% of max_video_tokens
            tokens = p.video_max_video_tokens or QWEN2_MAX_VIDEO_TOKENS
            total = fp.floor(fp.mul(tokens * factor * factor, fp.f64(Fraction("0.9"))))
            high = max(min(high, total * temporal // frames), floor_pixels)
        h, w = smart_resize(h1, w1, factor, low, high)
    grid_t = -(-frames // temporal)
    patches = grid_t * (h // patch) * (w // patch)
    return patches, CHANNELS * temporal * patch**2
