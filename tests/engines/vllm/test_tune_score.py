"""The scoring of ``mmpool tune --engine vllm``: each memory's bytes and the settings vLLM reads back exactly."""

from __future__ import annotations

import os
from pathlib import Path

from mmpool_cli.cli.vllm_options import VllmOptions
from mmpool_cli.engines.vllm.cache_traffic import read
from mmpool_cli.engines.vllm.gib import bytes_of
from mmpool_cli.engines.vllm.prefix import PrefixFlags
from mmpool_cli.engines.vllm.tune_score import ENCODER, KV, POOL, Scorer, VllmTuneInput, gib_text
from mmpool_cli.workload.hf import resolve

ROOT = Path(__file__).resolve().parents[3]
MODEL = str(ROOT / "examples" / "qwen2.5-vl-7b")
EXAMPLE = str(ROOT / "examples" / "traffic" / "vllm-chats.jsonl")


def test_gib_text_gives_vllm_the_bytes_exactly():
    for n in (1 << 20, 3 << 20, 1_000_000_000 >> 20 << 20, 288 << 30, 12345 << 20):
        assert bytes_of(float(gib_text(n))) == n


def _scorer(**launch: str) -> Scorer:
    request = VllmOptions(**launch).request(os.environ, resolve(MODEL), ())
    return Scorer(VllmTuneInput(request, read([EXAMPLE]), PrefixFlags(num_blocks=400, block_size=32)))


def test_each_memorys_bytes_follow_vllms_shapes():
    s = _scorer(limit_mm_per_prompt='{"video": 0}', max_num_batched_tokens="8192")
    # 28 layers x 4 KV heads x (128 + 128) x 2 bytes a token, 32 tokens a block
    assert s.block_bytes == 28 * 4 * 256 * 2 * 32 and s.bytes_of(KV, 10) == 10 * s.block_bytes
    # the encoder cache: Qwen2.5-VL's hidden size x 2 bytes a token, its floor the largest image
    assert (s.per_token, s.floor) == (3584 * 2, 16384) and s.bytes_of(ENCODER, 20000) == 20000 * 7168
    assert s.bytes_of(POOL, 5 << 20) == 5 << 20
    assert s.today() == {KV: 400, ENCODER: 16384, POOL: 0}


def test_the_encoder_setting_is_the_budget_above_the_floor_and_the_launchs_own_at_it():
    s = _scorer(limit_mm_per_prompt='{"video": 0}', max_num_batched_tokens="8192")
    assert s.mnbt_for(16384) == 8192 and s.mnbt_for(20000) == 20000
    assert _scorer(limit_mm_per_prompt='{"video": 0}', max_num_batched_tokens="30000").mnbt_for(16384) == 16384
