"""Families that are never pooled: the sizes they still move, against feature-sizes.md and transformers."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest

from mmpool_cli.workload import unpooled
from mmpool_cli.workload.families import FAMILIES
from mmpool_cli.workload.features import workload
from mmpool_cli.workload.items import parse_audio, parse_image, parse_video


def moved(family: str, *items) -> list[int]:
    fam = FAMILIES[family]
    return [t.bytes for t in workload(family, fam, dict(fam.settings), list(items), pooled=False).unpooled]


# feature-sizes.md §3 (W×H; each image alone in its request)
@pytest.mark.parametrize(
    ("family", "text", "expected"),
    [
        ("internvl", "1024x1024", 12_042_240),
        ("internvl", "1920x1080", 10_838_016),
        ("llava-onevision", "1024x1024", 8_847_360),
        ("llava-onevision", "1920x1080", 14_155_776),
        ("kimi-vl", "1024x1024", 10_245_312),
        ("kimi-vl", "1920x1080", 9_709_056),
    ],
)
def test_worked_image_examples(family: str, text: str, expected: int) -> None:
    assert moved(family, parse_image(text)) == [expected]


def test_internvl_video_is_32_tiles() -> None:
    assert moved("internvl", parse_video("1920x1080:30:30")) == [38_535_168]


def test_whisper_is_30_seconds_whatever_the_clip() -> None:
    assert moved("whisper", parse_audio("30")) == moved("whisper", parse_audio("45")) == [1_536_000]
    assert unpooled.whisper_shape(Fraction(10), mels=80) == (1, 80, 3000)


def test_llava_pads_each_image_of_a_multi_image_request() -> None:
    assert moved("llava-onevision", parse_image("1920x1080"), parse_image("1024x1024")) == [884_736, 884_736]


def test_minicpm_has_no_exact_rule_yet() -> None:
    # the remote-code slicing has not been checked against the real processor: no figure is given
    assert moved("minicpm-v", parse_image("1920x1080")) == []


@pytest.fixture(scope="module")
def llava_processor():
    from transformers.models.llava_onevision.image_processing_pil_llava_onevision import (
        LlavaOnevisionImageProcessorPil,
    )

    return LlavaOnevisionImageProcessorPil()


LLAVA_GRID = [(1024, 1024), (1920, 1080), (300, 200), (384, 384), (385, 1000), (2000, 500), (100, 3000), (777, 555)]


@pytest.mark.parametrize(("width", "height"), LLAVA_GRID)
def test_llava_patches_equal_the_real_processor(llava_processor, width: int, height: int) -> None:
    out = llava_processor(images=[np.zeros((height, width, 3), np.uint8)], return_tensors="np")["pixel_values"]
    assert out.shape[1] == unpooled.llava_anyres_patches(width, height)
