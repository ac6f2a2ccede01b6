"""The terminal report of vLLM's caches: every figure present, none cut, at any width."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from rich.console import Console

from mmpool_cli.engines.vllm import versions
from mmpool_cli.engines.vllm.request import VllmRequest
from mmpool_cli.render.vllm_caches import caches_text
from mmpool_cli.usecases.cache_vllm import vllm_caches
from mmpool_cli.workload import hf

EXAMPLE = str(Path(__file__).resolve().parents[2] / "examples" / "traffic" / "vllm-chats.jsonl")


@pytest.fixture(scope="module")
def report():
    return vllm_caches([EXAMPLE], VllmRequest(release=versions.release("0.34.0"), model=hf.resolve("qwen2.5-vl")))


@pytest.mark.parametrize("width", [40, 100])
def test_every_figure_is_printed_whole(report, width):
    console = Console(width=width, record=True, color_system=None)
    console.print(caches_text(report))
    text = console.export_text()
    pc, enc, pre = report["caches"]
    for figure in (
        pc["size_bytes"],
        pc["recommended_bytes"],
        pc["recommended_cost"]["host_bytes"],
        enc["recommended_tokens"],
        pre["size_tokens"],
        pre["hits"],
    ):
        assert f"{figure:,}" in text
    assert f"{pc['hits']:,} of {pc['lookups']:,} lookups" in text
    assert len(re.findall("█", text)) > 50  # the curves are drawn
