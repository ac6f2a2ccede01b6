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
