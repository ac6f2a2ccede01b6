"""The processor and encoder cache replays, checked against vLLM 0.34.0's own cache classes driven with
the same items in the same order (tests/data/vllm_cache_fixtures.json, scripts/record_vllm_cache_fixtures.py)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from mmpool_cli.engines.vllm import cache_items, encoder_replay, processor_replay
from mmpool_cli.engines.vllm import encoder_budget as eb

DATA = Path(__file__).resolve().parents[2] / "data" / "vllm_cache_fixtures.json"
FAMILIES = {
    "qwen2.5-vl": eb.QwenVision(2, 14, 2, 2, 3136, 12_845_056, 128 * 28 * 28, 768 * 28 * 28),
    "qwen3-vl": eb.QwenVision(3, 16, 2, 2, 65_536, 16_777_216, 4096, 25_165_824),
}


@pytest.fixture(scope="module")
def fixtures() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(DATA.read_text())
    assert data["vllm"] == "0.34.0"
    return data


def _tokens(fixtures: dict[str, Any], family: str) -> dict[str, int]:
    v = FAMILIES[family]
    return {k: eb.image_tokens(v, i["w"], i["h"]) for k, i in fixtures["families"][family]["items"].items()}


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_item_sizes_are_vllms_get_item_size_and_ring_chunks(fixtures, family):
    v, tokens = FAMILIES[family], _tokens(fixtures, family)
    items = fixtures["families"][family]["items"]
    for key, item in items.items():
        assert tokens[key] == item["tokens"]
        assert cache_items.item_size(v, tokens[key]) == item["item_size"], key
    chunks: dict[str, int] = {}
    for row in fixtures["processor"]:
        if row["family"] == family:
            chunks |= row.get("ring_chunk_bytes", {})
    assert len(chunks) >= 7
    for key, chunk in chunks.items():
        assert cache_items.shm_object_bytes(v, tokens[key]) + processor_replay.RING_CHUNK_HEADER == chunk, key


def _sizes(fixtures: dict[str, Any], family: str, kind: str) -> dict[str, int]:
    v = FAMILIES[family]
    size = cache_items.shm_object_bytes if kind == "shm" else cache_items.item_size
    return {k: size(v, n) for k, n in _tokens(fixtures, family).items()}


def test_processor_cache_hits_equal_vllms_at_every_recorded_size(fixtures):
    rows = fixtures["processor"]
    assert {(r["type"], r["api"], r["layout"]) for r in rows} == {
        ("lru", 1, "lru"),
        ("shm", 1, "shm"),
        ("lru", 2, "processor_only"),
    }
    assert {r["sequence"] for r in rows} == {"chat", "popular", "large"}
    assert any(r["errors"] for r in rows) and any(0 < sum(r["hits"]) < sum(r["total"]) for r in rows)
    for row in rows:
        family = row["family"]
        reqs = fixtures["families"][family]["sequences"][row["sequence"]]
        got = processor_replay.replay(
            reqs, _sizes(fixtures, family, row["type"]), row["capacity"], row["layout"], api_processes=row["api"]
        )
        where = (family, row["sequence"], row["layout"], row["capacity"])
        assert got.flags == row["flags"], where
        assert got.hits == row["hits"] and got.lookups == row["total"], where
        want = [(e["request"], e["where"], tuple(e.get("keys", ()))) for e in row["errors"]]
        assert got.failed == want, where


def test_encoder_cache_decisions_equal_encoder_cache_managers(fixtures):
    rows = fixtures["encoder"]
    kinds = {entry[0] for row in rows for entry in row["log"]}
    assert {"alloc", "hit", "wait", "free"} <= kinds
    for row in rows:
        family = row["family"]
        reqs = fixtures["families"][family]["sequences"][row["sequence"]]
        got = encoder_replay.replay(reqs, _tokens(fixtures, family), row["budget"], row["window"])
        assert got.log == row["log"], (family, row["sequence"], row["budget"], row["window"])
