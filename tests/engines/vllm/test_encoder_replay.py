"""The encoder cache replay makes EncoderCacheManager's own decisions (vLLM 0.30.0-0.34.0) under the same admission order."""

from __future__ import annotations

import pytest

from mmpool_cli.engines.vllm import encoder_replay


@pytest.mark.parametrize("release", ["0.30.0", "0.31.0", "0.32.0", "0.33.0", "0.34.0"])
def test_encoder_cache_decisions_equal_encoder_cache_managers(cache_releases, cache_tokens, release):
    cache_recorded = cache_releases[release]
    rows = cache_recorded["encoder"]
    kinds = {entry[0] for row in rows for entry in row["log"]}
    assert {"alloc", "hit", "dup", "wait", "step", "refuse", "free"} <= kinds
    for row in rows:
        family = row["family"]
        reqs = cache_recorded["families"][family]["sequences"][row["sequence"]]
        got = encoder_replay.replay(reqs, cache_tokens[family], row["budget"], row["window"], log=True)
        assert got.log == row["log"], (family, row["sequence"], row["budget"], row["window"])
