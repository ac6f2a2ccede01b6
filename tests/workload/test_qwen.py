"""Qwen sizes: the worked examples of feature-sizes.md, and equality with transformers' own code."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mmpool_cli.workload import qwen
from mmpool_cli.workload.families import FAMILIES
from mmpool_cli.workload.features import _qwen_params

Q25 = _qwen_params(dict(FAMILIES["qwen2.5-vl"].settings), FAMILIES["qwen2.5-vl"])
Q3 = _qwen_params(dict(FAMILIES["qwen3-vl"].settings), FAMILIES["qwen3-vl"])
Q2_HF_DEFAULT = qwen.QwenParams(14, 2, 2, 3136, 1_003_520, 100_352, 602_112, False)


def nbytes(shape: tuple[int, int]) -> int:
    return 4 * shape[0] * shape[1]


# feature-sizes.md §3 and §4.3 (W×H): bytes of pixel_values
@pytest.mark.parametrize(
    ("params", "width", "height", "expected"),
    [
        (Q25, 1024, 1024, 25_759_104),
        (Q25, 1920, 1080, 50_633_856),
        (Q2_HF_DEFAULT, 1024, 1024, 23_049_600),
        (Q2_HF_DEFAULT, 1920, 1080, 22_993_152),
        (Q3, 1024, 1024, 25_165_824),
        (Q3, 1920, 1080, 50_135_040),
    ],
)
def test_worked_image_examples(params, width: int, height: int, expected: int) -> None:
    assert nbytes(qwen.image_shape(height, width, params)) == expected


# feature-sizes.md §4.3: a 1080p, 30 fps source of the given length
@pytest.mark.parametrize(
    ("seconds", "qwen25", "qwen3"),
    [
        (10, 135_475_200, 141_557_760),
        (30, 406_425_600, 298_598_400),
        (60, 812_851_200, 280_166_400),
        (150, 2_032_128_000, 265_420_800),
        (300, 2_054_707_200, 235_929_600),
        (400, 1_994_194_944, 264_241_152),
    ],
)
def test_worked_video_examples(seconds: int, qwen25: int, qwen3: int) -> None:
    assert nbytes(qwen.video_shape(1080, 1920, 30 * seconds, Fraction(30), Q25)) == qwen25
    assert nbytes(qwen.video_shape(1080, 1920, 30 * seconds, Fraction(30), Q3)) == qwen3


def test_float_boundary_follows_the_float_result() -> None:
    # 251 / sqrt(251² / 50176) / 28 is exactly 8, but Python's floats give 7.999…: transformers
    # resizes a 251x251 image to 196 px, not the 224 exact arithmetic gives
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import smart_resize

    assert smart_resize(251, 251, 28, 3136, 28 * 28 * 64) == (196, 196)
    assert qwen.smart_resize(251, 251, 28, 3136, 28 * 28 * 64) == (196, 196)


sides = st.integers(min_value=1, max_value=20_000)
bounds = st.sampled_from([(3136, 12_845_056), (3136, 1_003_520), (65_536, 16_777_216), (3136, 28 * 28 * 64)])


@settings(max_examples=600, deadline=None)
@given(sides, sides, bounds, st.sampled_from([28, 32]))
def test_image_resize_equals_transformers(height: int, width: int, bound, factor: int) -> None:
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import smart_resize

    try:
        expected = smart_resize(height, width, factor, *bound)
    except ValueError:
        with pytest.raises(qwen.ResizeError):
            qwen.smart_resize(height, width, factor, *bound)
        return
    assert qwen.smart_resize(height, width, factor, *bound) == expected


@settings(max_examples=300, deadline=None)
@given(
    st.integers(min_value=2, max_value=768),
    st.integers(min_value=28, max_value=8000),
    st.integers(min_value=28, max_value=8000),
)
def test_volume_resize_equals_transformers(frames: int, height: int, width: int) -> None:
    from transformers.models.qwen3_vl.video_processing_qwen3_vl import smart_resize

    try:
        expected = smart_resize(frames, height, width, 2, 32, 4096, 25_165_824)
    except ValueError:
        return
    assert qwen.volume_resize(frames, height, width, 32, 4096, 25_165_824) == expected


def _sglang_reference(height: int, width: int, total: int, fps: float) -> tuple[int, tuple[int, int]]:
    """SGLang 0.5.23 ``qwen_vl.py`` (smart_nframes + preprocess_video sizes), in floats, as written there."""
    n = total / fps * 2.0
    n = min(min(max(n, 4), math.floor(min(768, total) / 2) * 2), total)
    frames = math.floor(n / 2) * 2
    max_pixels = max(min(768 * 28 * 28, 90_316_800 / frames * 2), int(128 * 28 * 28 * 1.05))
    h_bar = max(28, round(height / 28) * 28)
    w_bar = max(28, round(width / 28) * 28)
    if h_bar * w_bar > max_pixels:
        beta = math.sqrt((height * width) / max_pixels)
        h_bar = math.floor(height / beta / 28) * 28
        w_bar = math.floor(width / beta / 28) * 28
    elif h_bar * w_bar < 128 * 28 * 28:
        beta = math.sqrt(128 * 28 * 28 / (height * width))
        h_bar = math.ceil(height * beta / 28) * 28
        w_bar = math.ceil(width * beta / 28) * 28
    return frames, (h_bar, w_bar)


@settings(max_examples=300, deadline=None)
@given(
    st.integers(min_value=28, max_value=8000),
    st.integers(min_value=28, max_value=8000),
    st.integers(min_value=4, max_value=200_000),
    st.sampled_from(["24", "25", "29.97", "30", "59.94", "60", "7.5"]),
)
def test_video_sampling_equals_sglang(height: int, width: int, total: int, fps: str) -> None:
    if max(height, width) > 200 * min(height, width):
        return
    frames, size = _sglang_reference(height, width, total, float(fps))
    got = qwen.video_frames(total, Fraction(fps), Q25)
    assert got == frames
    assert qwen.sglang_video_resize(height, width, got, Q25) == size


@pytest.fixture(scope="module")
def qwen_processors():
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil

    return {
        "qwen2.5-vl": (Q25, Qwen2VLImageProcessorPil(min_pixels=3136, max_pixels=12_845_056)),
        "qwen3-vl": (Q3, Qwen2VLImageProcessorPil(patch_size=16, min_pixels=65_536, max_pixels=16_777_216)),
        "small": (
            qwen.QwenParams(14, 2, 2, 3136, 28 * 28 * 64, 0, 0, False),
            Qwen2VLImageProcessorPil(min_pixels=3136, max_pixels=28 * 28 * 64),
        ),
    }


# sizes that hit the round, floor (incl. float boundaries) and ceil branches, kept small for speed
GRID = [(w, h) for w in (1, 27, 56, 230, 251, 641, 1280) for h in (14, 230, 479, 720)] + [(1920, 1080), (3586, 200)]


@pytest.mark.parametrize("name", ["qwen2.5-vl", "qwen3-vl", "small"])
def test_pixel_values_bytes_equal_the_real_processor(qwen_processors, name: str) -> None:
    params, processor = qwen_processors[name]
    checked = 0
    for width, height in GRID:
        if max(width, height) > 200 * min(width, height):
            continue
        image = np.zeros((height, width, 3), dtype=np.uint8)
        out = processor(images=[image], return_tensors="np")["pixel_values"]
        assert out.dtype == np.float32
        assert nbytes(qwen.image_shape(height, width, params)) == out.nbytes, (width, height)
        checked += 1
    assert checked >= 25
