"""The encoder cache budget and the Qwen token counts, checked against vLLM 0.34.0's own functions."""

from __future__ import annotations

import pytest

from mmpool_cli.engines.vllm import encoder_budget as eb
from mmpool_cli.engines.vllm import versions
from mmpool_cli.workload import qwen

QWEN25 = eb.QwenVision(2, 14, 2, 2, 3136, 12_845_056, 128 * 28 * 28, 768 * 28 * 28)
QWEN3 = eb.QwenVision(3, 16, 2, 2, 65_536, 16_777_216, 4096, 25_165_824)
FAMILIES = {"qwen2.5-vl": QWEN25, "qwen3-vl": QWEN3}


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_image_tokens_match_get_num_image_tokens(recorded, family):
    v = FAMILIES[family]
    for row in recorded["families"][family]["images"]:
        if "error" in row:
            with pytest.raises(qwen.ResizeError):
                eb.image_tokens(v, row["w"], row["h"])
        else:
            assert eb.image_tokens(v, row["w"], row["h"]) == row["tokens"], row


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_max_tokens_per_item_match_get_mm_max_tokens_per_item(recorded, family):
    v = FAMILIES[family]
    rec = recorded["families"][family]
    assert list(eb.most_features(v, v.max_pixels)) == rec["most_features"]
    for row in rec["max_tokens_per_item"]:
        assert eb.max_tokens_per_item(v, row["seq_len"], ("image", "video")) == row["both"], row
        assert eb.max_tokens_per_item(v, row["seq_len"], ("image",)) == {"image": row["both"]["image"]}


def test_the_image_figure_ignores_the_context_length(recorded):
    # at 4096 context vLLM still counts 16 384 tokens for the largest image (and 1 video frame)
    row = next(r for r in recorded["families"]["qwen2.5-vl"]["max_tokens_per_item"] if r["seq_len"] == 4096)
    assert row["both"] == {"image": 16_384, "video": 16_384}


def test_the_budget_matches_compute_mm_encoder_budget(recorded):
    for row in recorded["encoder_budget"]:
        assert eb.budget(row["max_num_batched_tokens"], row["per_item"]) == row["budget"][1], row


def test_batch_defaults_match_get_batch_defaults(recorded):
    rules = versions.release("0.34.0").batch_defaults
    for row in recorded["batch_defaults"]:
        gpu = eb.Gpu(row["memory"], row["name"], tuple(row["capability"]))
        got = eb.default_batched_tokens(rules, gpu, max_model_len=1 << 30)
        assert (got.tokens, got.max_num_seqs) == (row["server"], row["server_seqs"]), row


def test_gb10_only_counts_from_the_release_that_checks_it():
    gb10 = eb.Gpu(128_000_000_000, "NVIDIA GB10", (12, 1))
    assert (
        eb.default_batched_tokens(versions.release("0.34.0").batch_defaults, gb10, max_model_len=1 << 20).tokens == 2048
    )
    assert (
        eb.default_batched_tokens(versions.release("0.32.0").batch_defaults, gb10, max_model_len=1 << 20).tokens == 8192
    )


def test_throughput_mode_doubles_and_the_context_clamps():
    rules = versions.release("0.34.0").batch_defaults
    h200 = eb.Gpu(150_754_820_096, "NVIDIA H200", (9, 0))
    assert eb.default_batched_tokens(rules, h200, max_model_len=128_000, performance_mode="throughput").tokens == 16_384
    # min(max_num_seqs * max_model_len, tokens): 2 sequences of 1 000 tokens
    assert eb.default_batched_tokens(rules, h200, max_model_len=1000, max_num_seqs=2).tokens == 2000
    assert eb.default_batched_tokens(rules, h200, max_model_len=20_000, chunked_prefill=False).tokens == 20_000


def test_every_modality_disabled_means_no_encoder_cache():
    assert eb.budget(8192, {}) == 0


def test_a_huge_max_pixels_is_refused_not_searched():
    v = eb.QwenVision(2, 14, 2, 2, 3136, 784 << 30, 3136, 3136)
    with pytest.raises(qwen.ResizeError):
        eb.most_features(v, v.max_pixels)
