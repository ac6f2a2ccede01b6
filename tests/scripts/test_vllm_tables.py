"""The vLLM generator's rule extraction: it reads known shapes and refuses unknown ones loudly."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))

import gen_vllm_tables  # noqa: E402
import vllm_rules  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]

BATCH = """
class EngineArgs:
    @classmethod
    def get_batch_defaults(cls, world_size):
        if device_memory >= 160 * GiB_bytes:
            default_max_num_batched_tokens = {
                UsageContext.LLM_CLASS: 16384,
                UsageContext.OPENAI_API_SERVER: 16384,
            }
            default_max_num_seqs = {
                UsageContext.LLM_CLASS: 1024,
                UsageContext.OPENAI_API_SERVER: 1024,
            }
        elif device_memory >= 70 * GiB_bytes and "a100" not in device_name:
            default_max_num_batched_tokens = {
                UsageContext.LLM_CLASS: 16384,
                UsageContext.OPENAI_API_SERVER: 8192,
            }
            default_max_num_seqs = {
                UsageContext.LLM_CLASS: 1024,
                UsageContext.OPENAI_API_SERVER: 1024,
            }
        else:
            default_max_num_batched_tokens = {
                UsageContext.LLM_CLASS: 8192,
                UsageContext.OPENAI_API_SERVER: 2048,
            }
            default_max_num_seqs = {
                UsageContext.LLM_CLASS: 256,
                UsageContext.OPENAI_API_SERVER: 256,
            }
        return default_max_num_batched_tokens, default_max_num_seqs

    def _set_defaults(self):
        if self.performance_mode == "throughput":
            if orig_max_num_batched_tokens is None:
                self.max_num_batched_tokens *= 2
        self.max_num_batched_tokens = min(
            self.max_num_seqs * model_config.max_model_len,
            self.max_num_batched_tokens,
        )
"""


def _tree(tmp_path: Path, text: str) -> Path:
    (tmp_path / "vllm" / "engine").mkdir(parents=True)
    (tmp_path / "vllm" / "engine" / "arg_utils.py").write_text(text)
    return tmp_path


def test_batch_tiers_are_read_from_the_source(tmp_path):
    got = vllm_rules._batch_defaults(_tree(tmp_path, BATCH))
    assert [(t["min_memory_gib"], t["excluded_names"], t["server"]) for t in got["tiers"]] == [
        (160, [], 16384),
        (70, ["a100"], 8192),
        (None, [], 2048),
    ]
    assert got["gb10_capability"] is None


def test_an_unknown_tier_condition_stops_the_generator(tmp_path):
    src = _tree(tmp_path, BATCH.replace('"a100" not in device_name', 'device_name.startswith("h")'))
    with pytest.raises(vllm_rules.UnknownShape, match="unknown batch-default condition"):
        vllm_rules._batch_defaults(src)


def test_a_missing_rule_names_the_file(tmp_path):
    with pytest.raises(vllm_rules.UnknownShape, match="gpu_ipc_memory.py|encoder_cache_manager.py"):
        vllm_rules._encoder(_tree(tmp_path, BATCH))


def test_the_committed_tables_cover_the_documented_releases():
    for name in ("flags.json", "releases.json"):
        data = json.loads((ROOT / "mmpool_cli" / "engines" / "vllm" / "data" / name).read_text())
        assert (
            data["versions"][0] == gen_vllm_tables.MIN_VERSION and data["versions"][-1] == gen_vllm_tables.MAX_VERSION
        )
        assert data["generator"] == gen_vllm_tables.GENERATOR


def test_version_strings():
    assert gen_vllm_tables.version_key("0.34.0") > gen_vllm_tables.version_key("0.9.2")
    with pytest.raises(SystemExit):
        gen_vllm_tables.version_key("0.34.0rc1")
