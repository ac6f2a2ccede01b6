"""Shared fixtures of the vLLM engine tests: what vLLM 0.34.0's own functions computed."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

DATA = Path(__file__).resolve().parents[2] / "data"


@pytest.fixture(scope="session")
def recorded() -> dict[str, Any]:
    """tests/data/vllm_fixtures.json, written by scripts/record_vllm_fixtures.py from vLLM 0.34.0."""
    data: dict[str, Any] = json.loads((DATA / "vllm_fixtures.json").read_text())
    assert data["vllm"] == "0.34.0"
    return data


@pytest.fixture(scope="session")
def probes() -> list[dict[str, Any]]:
    """tests/data/vllm_parser_probes.json: what each release's own parser made of each argv."""
    data: dict[str, Any] = json.loads((DATA / "vllm_parser_probes.json").read_text())
    items: list[dict[str, Any]] = data["probes"]
    return items


@pytest.fixture(scope="session")
def cache_recorded() -> dict[str, Any]:
    """tests/data/vllm_cache_fixtures.json: vLLM 0.34.0's own cache classes driven with generated traffic
    (scripts/record_vllm_cache_fixtures.py)."""
    data: dict[str, Any] = json.loads((DATA / "vllm_cache_fixtures.json").read_text())
    assert data["vllm"] == "0.34.0"
    return data


@pytest.fixture(scope="session")
def cache_releases(cache_recorded) -> dict[str, dict[str, Any]]:
    """The same traffic through each release's own caches: 0.34.0, and 0.30.0 to 0.33.0
    (``record_vllm_cache_fixtures.py --version V --out tests/data/vllm_cache_fixtures_V.json``)."""
    out = {"0.34.0": cache_recorded}
    for path in sorted(DATA.glob("vllm_cache_fixtures_*.json")):
        data: dict[str, Any] = json.loads(path.read_text())
        out[data["vllm"]] = data
    assert sorted(out) == ["0.30.0", "0.31.0", "0.32.0", "0.33.0", "0.34.0"]
    return out


@pytest.fixture(scope="session")
def cache_vision() -> dict[str, Any]:
    """The recorded families' vision settings (the checkpoints' image processors)."""
    from mmpool_cli.engines.vllm import encoder_budget as eb

    return {
        "qwen2.5-vl": eb.QwenVision(2, 14, 2, 2, 3136, 12_845_056, 128 * 28 * 28, 768 * 28 * 28),
        "qwen3-vl": eb.QwenVision(3, 16, 2, 2, 65_536, 16_777_216, 4096, 25_165_824),
    }


@pytest.fixture(scope="session")
def cache_tokens(cache_recorded, cache_vision) -> dict[str, dict[str, int]]:
    """Each recorded family's items -> their embedding tokens, as mmpool counts them."""
    from mmpool_cli.engines.vllm import encoder_budget as eb

    return {
        family: {k: eb.image_tokens(cache_vision[family], i["w"], i["h"]) for k, i in data["items"].items()}
        for family, data in cache_recorded["families"].items()
    }


@pytest.fixture(scope="session")
def float32_items() -> Any:
    """The processing that keeps float32 pixels (host normalization, ``--dtype float32``): the items of
    vllm_cache_fixtures.json, whose recorder fed vLLM's caches float32 pixel tensors."""
    from mmpool_cli.engines.vllm import item_bytes, versions

    proc = item_bytes.processing(versions.release("0.34.0"), "qwen2.5-vl", False, "float32")
    assert proc.pixel_dtype == "float32"
    return proc


@pytest.fixture(scope="session")
def item_recorded() -> dict[str, Any]:
    """tests/data/vllm_item_fixtures.json: vLLM's own processing of images (each release) and its lru caches
    driven by it (scripts/record_vllm_item_fixtures.py)."""
    data: dict[str, Any] = json.loads((DATA / "vllm_item_fixtures.json").read_text())
    assert data["generator"] == "scripts/record_vllm_item_fixtures.py"
    return data
