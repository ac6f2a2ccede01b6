"""Gemma 3, Llama 4 and Kimi-K2.5: how many crops, tiles or patches one image becomes.

Each function runs the reference's float steps through ``exact``: Gemma 3's pan-and-scan and
Kimi-K2.5's NaViT resize in Python floats, Llama 4's canvas choice in float32 tensors.
Pure core: standard library only.
"""

from __future__ import annotations

from fractions import Fraction

from mmpool_cli.workload import exact as fp


def gemma3_crops(
    width: int,
    height: int,
    min_crop_size: int = 256,
    max_num_crops: int = 4,
    min_ratio_to_activate: Fraction = Fraction("1.2"),
) -> int:
    """Pan-and-scan crops Gemma 3 adds to one image (transformers ``Gemma3ImageProcessor.pan_and_scan``).

    0 when the image is not elongated enough or a crop would be under ``min_crop_size``.
    """
    ratio_min = fp.f64(min_ratio_to_activate)
    long, short = (width, height) if width >= height else (height, width)
    ratio = fp.div(long, short)
    if ratio < ratio_min:
        return 0
    crops = fp.floor(fp.add(ratio, Fraction(1, 2)))
    crops = min(fp.floor(fp.div(long, min_crop_size)), crops)
    crops = min(max_num_crops, max(2, crops))
    crop_long = fp.ceil(fp.div(long, crops))
    if min(crop_long, short) < min_crop_size:
        return 0
    return crops


def llama4_resolutions(max_patches: int, tile: int) -> list[tuple[int, int]]:
    """Llama 4's candidate canvases ``(height, width)``, in transformers' order."""
    by_ratio: dict[Fraction, list[tuple[int, int]]] = {}
    for chunks in range(max_patches, 0, -1):
        for rows in sorted(d for d in range(1, chunks + 1) if chunks % d == 0):
            by_ratio.setdefault(Fraction(rows, chunks // rows), []).append((rows, chunks // rows))
    return [(r * tile, c * tile) for pairs in by_ratio.values() for r, c in pairs]


def llama4_canvas(width: int, height: int, max_patches: int = 16, tile: int = 336) -> tuple[int, int]:
    """The canvas ``(height, width)`` Llama 4 pads an image to (transformers ``get_best_fit``).

    The smallest upscale at or above 1, else the largest downscale; ties (as float32 compares
    them) go to the smallest area, then to the first candidate.
    """
    candidates = llama4_resolutions(max_patches, tile)
    scales = []
    for th, tw in candidates:
        scale_w = fp.div(tw, width, fp.SINGLE)
        scale_h = fp.div(th, height, fp.SINGLE)
        scales.append(scale_w if scale_h > scale_w else scale_h)
    up = [s for s in scales if s >= 1]
    selected = min(up) if up else max(scales)
    chosen = [c for c, s in zip(candidates, scales, strict=True) if s == selected]
    return min(chosen, key=lambda c: c[0] * c[1])


def llama4_tiles(width: int, height: int, max_patches: int = 16, tile: int = 336) -> int:
    """Tiles of one Llama 4 image: the canvas's tiles, plus a global tile when there are several."""
    th, tw = llama4_canvas(width, height, max_patches, tile)
    tiles = (th // tile) * (tw // tile)
    return tiles + 1 if tiles > 1 else tiles


def kimi_k25_patches(
    width: int,
    height: int,
    patch_size: int = 14,
    merge_kernel_size: int = 2,
    in_patch_limit: int = 16384,
    patch_limit_on_one_side: int = 512,
) -> int:
    """Patches of one Kimi-K2.5 image (SGLang ``kimi_k25.py::navit_resize_config``).

    The image is scaled down to the patch budgets (never up) and padded to a multiple of
    patch × merge size on each side.
    """
    s1 = fp.sqrt(fp.div(in_patch_limit, max(1, width // patch_size) * max(1, height // patch_size)))
    s2 = fp.div(patch_limit_on_one_side * patch_size, width)
    s3 = fp.div(patch_limit_on_one_side * patch_size, height)
    scale = min(Fraction(1), s1, s2, s3)
    side = patch_limit_on_one_side * patch_size
    new_w = min(max(1, fp.floor(fp.mul(width, scale))), side)
    new_h = min(max(1, fp.floor(fp.mul(height, scale))), side)
    factor = merge_kernel_size * patch_size
    padded_w = -(-new_w // factor) * factor
    padded_h = -(-new_h // factor) * factor
    return (padded_h // patch_size) * (padded_w // patch_size)
