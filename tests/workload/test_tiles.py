"""Gemma 3, Llama 4 and Kimi-K2.5: worked examples, and Gemma 3 against the real processor."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mmpool_cli.workload import tiles
from mmpool_cli.workload.families import FAMILIES
from mmpool_cli.workload.features import pooled_tensor
from mmpool_cli.workload.items import Image


def pooled_bytes(name: str, width: int, height: int, **override) -> int:
    fam = FAMILIES[name]
    return pooled_tensor(fam, dict(fam.settings) | override, Image(width, height)).bytes


# feature-sizes.md §3 (W×H)
@pytest.mark.parametrize(
    ("name", "width", "height", "expected"),
    [
        ("gemma3", 1024, 1024, 9_633_792),
        ("gemma3", 1920, 1080, 9_633_792),
        ("llama4", 1024, 1024, 11_515_392),
        ("llama4", 1920, 1080, 10_838_016),
        ("kimi-k2.5", 1024, 1024, 12_879_552),
        ("kimi-k2.5", 1920, 1080, 25_316_928),
    ],
)
def test_worked_examples(name: str, width: int, height: int, expected: int) -> None:
    assert pooled_bytes(name, width, height) == expected


def test_gemma3_pan_and_scan_worked_example() -> None:
    assert pooled_bytes("gemma3", 1920, 1080, pan_and_scan=True) == 28_901_376
    assert pooled_bytes("gemma3", 1024, 1024, pan_and_scan=True) == 9_633_792


def test_llama4_canvases_are_transformers_order() -> None:
    # transformers' docstring example: max_num_chunks=4, patch 224 (ratios grouped by first appearance)
    assert tiles.llama4_resolutions(4, 224)[:4] == [(224, 896), (448, 448), (224, 224), (896, 224)]


def test_llama4_small_image_is_one_tile() -> None:
    assert tiles.llama4_tiles(300, 200) == 1


@pytest.fixture(scope="module")
def gemma3_processor():
    from transformers.models.gemma3.image_processing_pil_gemma3 import Gemma3ImageProcessorPil

    return Gemma3ImageProcessorPil(
        size={"height": 896, "width": 896},
        do_pan_and_scan=True,
        pan_and_scan_min_crop_size=256,
        pan_and_scan_max_num_crops=4,
        pan_and_scan_min_ratio_to_activate=1.2,
    )


GEMMA_GRID = [(1920, 1080), (1080, 1920), (1024, 1024), (600, 500), (601, 500), (2000, 300), (300, 1300), (5000, 1000)]


@pytest.mark.parametrize(("width", "height"), GEMMA_GRID)
def test_gemma3_bytes_equal_the_real_processor(gemma3_processor, width: int, height: int) -> None:
    image = np.zeros((height, width, 3), dtype=np.uint8)
    out = gemma3_processor(images=[image], return_tensors="np")["pixel_values"]
    assert out.dtype == np.float32
    assert pooled_bytes("gemma3", width, height, pan_and_scan=True) == out.nbytes


@pytest.fixture(scope="module")
def llama4_rules(hf_functions):
    return hf_functions(
        "transformers.models.llama4.image_processing_llama4",
        ["get_factors", "find_supported_resolutions", "get_best_fit"],
    )


@pytest.fixture(scope="module")
def kimi_rules(hf_functions):
    return hf_functions("transformers.models.kimi_k25.image_processing_kimi_k25", ["navit_resize"])


sides = st.integers(min_value=1, max_value=12_000)


@settings(max_examples=300, deadline=None)
@given(sides, sides, st.sampled_from([4, 9, 16]))
def test_llama4_canvas_equals_transformers(llama4_rules, width: int, height: int, max_patches: int) -> None:
    import torch
    from transformers.image_utils import SizeDict

    resolutions = llama4_rules["find_supported_resolutions"](max_patches, SizeDict(height=336, width=336))
    assert [tuple(r) for r in resolutions] == tiles.llama4_resolutions(max_patches, 336)
    canvas = llama4_rules["get_best_fit"]((height, width), torch.tensor(resolutions))
    assert tuple(int(v) for v in canvas) == tiles.llama4_canvas(width, height, max_patches, 336)


@settings(max_examples=500, deadline=None)
@given(sides, sides)
def test_kimi_k25_patches_equal_transformers(kimi_rules, width: int, height: int) -> None:
    _, (padded_h, padded_w) = kimi_rules["navit_resize"](height, width, 14, 2, 16384, 512)
    assert tiles.kimi_k25_patches(width, height) == (padded_h // 14) * (padded_w // 14)
