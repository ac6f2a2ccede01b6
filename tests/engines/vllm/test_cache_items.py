"""An image's bytes in vLLM's caches: get_item_size and the shm ring's chunk, as vLLM 0.34.0 computed them."""

from __future__ import annotations

import pytest

from mmpool_cli.engines.vllm import cache_items, processor_replay


@pytest.mark.parametrize("family", ["qwen2.5-vl", "qwen3-vl"])
def test_item_sizes_are_vllms_get_item_size_and_ring_chunks(
    cache_recorded, cache_vision, cache_tokens, float32_items, family
):
    v, tokens = cache_vision[family], cache_tokens[family]
    for key, item in cache_recorded["families"][family]["items"].items():
        assert tokens[key] == item["tokens"]
        assert cache_items.item_size(v, tokens[key], float32_items) == item["item_size"], key
    chunks: dict[str, int] = {}
    for row in cache_recorded["processor"]:
        if row["family"] == family:
            chunks |= row.get("ring_chunk_bytes", {})
    assert len(chunks) >= 7
    for key, chunk in chunks.items():
        assert (
            cache_items.shm_object_bytes(v, tokens[key], float32_items) + processor_replay.RING_CHUNK_HEADER == chunk
        ), key
