"""mmpool cache --engine vllm's use case: the report's shape and its refusals, each one line."""

from __future__ import annotations

from pathlib import Path

import pytest

from mmpool_cli.engines.vllm import versions
from mmpool_cli.engines.vllm.request import VllmRequest
from mmpool_cli.errors import MmpoolError
from mmpool_cli.usecases.cache_vllm import vllm_caches
from mmpool_cli.workload import hf

EXAMPLE = str(Path(__file__).resolve().parents[2] / "examples" / "traffic" / "vllm-chats.jsonl")


def _req() -> VllmRequest:
    return VllmRequest(release=versions.release("0.34.0"), model=hf.resolve("qwen2.5-vl"))


def test_the_report_holds_the_traffic_and_both_caches():
    report = vllm_caches([EXAMPLE], _req(), window=2)
    assert (report["engine"], report["vllm_version"], report["status"]) == ("vLLM 0.34.0", "0.34.0", "ok")
    assert report["traffic"]["images"] == 103 and report["traffic"]["distinct_images"] == 24
    names = [c["name"] for c in report["caches"]]
    assert names == ["processor", "encoder", "prefix"]  # the prefix cache where the bodies carry prompts
    for cache in report["caches"]:
        assert {"name", "engine", "size_bytes", "lookups", "hits", "curve", "recommended_bytes"} <= set(cache)
        assert all(isinstance(p["hits"], int) for p in cache["curve"])


@pytest.mark.parametrize(
    ("files", "window", "message"), [([], 1, "give the traffic"), ([EXAMPLE], 0, "--encoder-window 0")]
)
def test_refusals_are_one_line(files, window, message):
    with pytest.raises(MmpoolError, match=message) as e:
        vllm_caches(files, _req(), window=window)
    assert "\n" not in str(e.value)


def test_a_trace_or_a_log_not_both():
    with pytest.raises(MmpoolError, match="one of the two"):
        vllm_caches([EXAMPLE], _req(), trace=("t.jsonl", []))
    with pytest.raises(MmpoolError, match="no image item"):
        vllm_caches([], _req(), trace=("t.jsonl", [("r0", "video", None, 10)]))
