"""The terminal text of a vLLM plan: laid out at the console's width, every figure whole."""

from __future__ import annotations

import io
import re

import pytest
from rich.console import Console

from mmpool_cli.engines.vllm import gib, versions
from mmpool_cli.engines.vllm import plan as P
from mmpool_cli.engines.vllm.processor_cache import DataParallel
from mmpool_cli.render.vllm_text import plan_text
from mmpool_cli.workload import hf
from mmpool_cli.workload.items import parse_image, parse_video

NUMBER_AND_UNIT = re.compile(r"[0-9][0-9,]* B\b")


def _text(plan: P.VllmPlan, width: int) -> str:
    out = io.StringIO()
    Console(file=out, width=width, color_system=None, highlight=False).print(plan_text(plan))
    return out.getvalue()


def _worked_example() -> P.VllmPlan:
    return P.make_plan(
        P.VllmRequest(
            release=versions.release("0.34.0"),
            dp=DataParallel(size=4),
            model=hf.resolve("qwen2.5-vl"),
            items=(parse_image("1920x1080"),),
        )
    )


def test_the_worked_example_reads_whole_numbers():
    text = _text(_worked_example(), 120)
    assert text.startswith("mmpool plan: OK  (vLLM 0.34.0")
    assert "host RAM, at most  34,359,738,368 B (32 GiB)" in text
    assert re.search(r"image 1920x1080 +2,691 +yes", text)
    assert "off (0 GiB)" in text


@pytest.mark.parametrize("width", [40, 60, 80, 100])
def test_no_line_is_wider_than_the_console_and_no_number_is_split(width):
    plan = _worked_example()
    text = _text(plan, width)
    assert max(len(line) for line in text.splitlines()) <= width
    flat = " ".join(text.split())
    # every byte figure of every finding is still whole, with its unit, once the lines are joined
    for f in plan.findings:
        for figure in NUMBER_AND_UNIT.findall(f.message):
            assert figure in flat, (width, figure)
    assert not re.search(r"[0-9],\n *[0-9]|[0-9]\n *B\b", text)


def test_a_failing_pool_shows_its_items_and_findings():
    p = P.make_plan(
        P.VllmRequest(
            release=versions.release("0.34.0"),
            model=hf.resolve("qwen2.5-vl"),
            ipc_gb=gib.parse("--mm-ipc-gpu-memory-gb", "0.1"),
            items=(parse_video("3840x2160:10:30"),),
        )
    )
    text = _text(p, 100)
    assert text.startswith("mmpool plan: FAIL") and "TOO LARGE" in text
    assert re.search(r"error +vllm-decode-request-too-large", text)
