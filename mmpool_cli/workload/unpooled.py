"""Families whose features never enter SGLang 0.5.23's pool: how big those features still are.

InternVL's tiler and LLaVA's anyres run in SGLang (``processors/internvl.py``,
``multimodal/mm_utils.py``); Kimi-VL follows its checkpoint's processor and Whisper-style audio
is a fixed 30 s mel spectrogram. The float steps run through ``exact``. These tensors travel
outside the pool, so they only explain what a ``cpu`` transport moves. Pure core: standard
library only.
"""

from __future__ import annotations

from fractions import Fraction

from mmpool_cli.core.units import align_up
from mmpool_cli.workload import exact as fp

INTERNVL_TILE = 448
INTERNVL_MAX_TILES = 12  # IMAGE_MAX_NUM
INTERNVL_VIDEO_FRAMES = 32  # DEFAULT_VIDEO_NUM_FRAMES, one tile each
LLAVA_PATCH = 384
LLAVA_GRID = 6  # anyres_max_9 checkpoints: canvases of (1..6) x (1..6) patches
KIMI_VL_PATCH = 14
KIMI_VL_TOKEN_LIMIT = 4096
WHISPER_FRAMES = 3000  # 30 s at 100 mel frames per second, padded or truncated
WHISPER_MELS = 128


def internvl_tiles(width: int, height: int, max_num: int = INTERNVL_MAX_TILES) -> int:
    """448-px tiles SGLang's InternVL tiler makes of one image, its thumbnail included.

    The grid whose cols/rows is closest to the image's aspect ratio (floats, as SGLang compares
    them), more tiles on a tie; a thumbnail tile is added when the grid has more than one.
    """
    aspect = fp.div(width, height)
    # the same set, sorted the same way, so that equal products keep SGLang's order
    targets = sorted(
        {(i, j) for n in range(1, max_num + 1) for i in range(1, n + 1) for j in range(1, n + 1) if i * j <= max_num},
        key=lambda r: r[0] * r[1],
    )
    best, best_diff = (1, 1), None
    for x, y in targets:
        diff = abs(fp.add(aspect, -fp.div(x, y)))
        if best_diff is None or diff < best_diff:
            best, best_diff = (x, y), diff
        elif diff == best_diff and x * y > best[0] * best[1]:
            best = (x, y)
    blocks = best[0] * best[1]
    return blocks + 1 if blocks > 1 else blocks


def llava_anyres_patches(width: int, height: int, patch: int = LLAVA_PATCH, grid: int = LLAVA_GRID) -> int:
    """Patches of one image under LLaVA's anyres: the best canvas's patches plus the resized base image.

    ``select_best_resolution``: the canvas with the largest effective resolution, then the least waste.
    """

    def rank(canvas: tuple[int, int]) -> tuple[int, int]:
        cw, ch = canvas
        scale = min(fp.div(cw, width), fp.div(ch, height))
        effective = min(fp.floor(fp.mul(width, scale)) * fp.floor(fp.mul(height, scale)), width * height)
        return effective, -(cw * ch - effective)

    # max() keeps the first of equals, as SGLang's loop keeps its first strictly better canvas
    best = max(((i * patch, j * patch) for i in range(1, grid + 1) for j in range(1, grid + 1)), key=rank)
    return (best[0] // patch) * (best[1] // patch) + 1


def kimi_vl_patches(width: int, height: int, limit: int = KIMI_VL_TOKEN_LIMIT, patch: int = KIMI_VL_PATCH) -> int:
    """14-px patches of one Kimi-VL image: scaled under ``in_token_limit`` patches, padded to 28."""
    count = (width // patch) * (height // patch)
    if count > limit:
        scale = fp.sqrt(fp.div(limit, count))
        width, height = fp.floor(fp.mul(width, scale)), fp.floor(fp.mul(height, scale))
    factor = 2 * patch
    padded_w = align_up(width, factor)
    padded_h = -(-height // factor) * factor
    return (padded_w // patch) * (padded_h // patch)


def whisper_shape(seconds: Fraction, mels: int = WHISPER_MELS) -> tuple[int, int, int]:
    """``input_features`` of one clip: ``[1, mels, 3000]`` whatever its length (padded or cut to 30 s)."""
    del seconds  # the extractor pads or truncates every clip to 30 s
    return 1, mels, WHISPER_FRAMES
