"""The terminal text of a vLLM plan: every figure whole, every finding on its line."""

from __future__ import annotations

from mmpool_cli.engines.vllm import gib, versions
from mmpool_cli.engines.vllm import plan as P
from mmpool_cli.engines.vllm.processor_cache import DataParallel
from mmpool_cli.render.vllm_text import plan_text
from mmpool_cli.workload import hf
from mmpool_cli.workload.items import parse_image, parse_video


def test_the_worked_example_reads_whole_numbers():
    p = P.make_plan(P.VllmRequest(release=versions.release("0.34.0"), dp=DataParallel(size=4),
                                  model=hf.resolve("qwen2.5-vl"), items=(parse_image("1920x1080"),)))
    text = plan_text(p)
    assert text.startswith("mmpool plan: OK  (vLLM 0.34.0")
    assert "host RAM, at most  34,359,738,368 B (32 GiB)" in text
    assert "image 1920x1080                 2,691   yes" in text
    assert "off (0 GiB)" in text


def test_a_failing_pool_shows_its_items_and_findings():
    p = P.make_plan(P.VllmRequest(release=versions.release("0.34.0"), model=hf.resolve("qwen2.5-vl"),
                                  ipc_gb=gib.parse("--mm-ipc-gpu-memory-gb", "0.1"),
                                  items=(parse_video("3840x2160:10:30"),)))
    text = plan_text(p)
    assert text.startswith("mmpool plan: FAIL") and "TOO LARGE" in text
    assert "error    vllm-decode-request-too-large:" in text
