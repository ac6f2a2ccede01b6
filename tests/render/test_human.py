"""Renderers return text or renderables; the human plan reads the same every time."""

from __future__ import annotations

import io
import json

from rich.console import Console

from mmpool_cli.engines.sglang.models import Budget, PlanRequest
from mmpool_cli.engines.sglang.plan import make_plan
from mmpool_cli.render.human import plan_human
from mmpool_cli.render.text import to_json


def render(renderable) -> str:
    console = Console(file=io.StringIO(), width=120, color_system=None, legacy_windows=False, highlight=False)
    console.print(renderable)
    return console.file.getvalue()


def example_plan(**kwargs):
    return make_plan(PlanRequest(budget=Budget(bytes=2**30, source="flag"), workers=4, tp_size=8, **kwargs))


def test_human_plan_shows_exact_bytes_and_settings() -> None:
    text = render(plan_human(example_plan(feature_sizes=(6 * 2**20,))))
    assert "mmpool plan: OK" in text
    assert "268,435,456 B (256 MiB)" in text
    assert "147,456 B (144 KiB)" in text
    assert "268,288,000 B (≈255.86 MiB)" in text
    assert "export SGLANG_MM_FEATURE_CACHE_MB=1024" in text
    assert (
        "sglang serve --model-path MODEL --tokenizer-worker-num 4 --mm-feature-transport cuda_ipc --tp-size 8" in text
    )
    assert " GB" not in text  # binary units only, never a 1024-based "GB"
    assert "[from --size]" in text  # brackets are text, not rich markup


def test_human_plan_failure_has_no_settings() -> None:
    plan = make_plan(PlanRequest(budget=Budget(bytes=2**20, source="flag"), workers=8, tp_size=8))
    text = render(plan_human(plan))
    assert "FAIL" in text
    assert "pool-too-small" in text
    assert "Settings to copy" not in text


def test_json_leads_with_schema_version_and_status() -> None:
    plan = example_plan()
    data = json.loads(to_json(plan))
    assert list(data)[:3] == ["schema_version", "status", "sglang_version"]
    assert data["per_worker_bytes"] == plan.per_worker_bytes
    assert data["findings"][0]["severity"] in {"error", "warning", "info"}


def test_vmm_plan_shows_hbm_without_and_at_most_with_the_positional_pools() -> None:
    text = render(plan_human(example_plan(transport="cuda_vmm")))
    assert "total                    3,283,353,600 B (≈3.06 GiB)" in text
    assert "positional-embeds pools  4 × 268,435,456 B (256 MiB) = 1,073,741,824 B (1 GiB)" in text
    assert "at most                  4,357,095,424 B (≈4.06 GiB)  [with the positional-embeds pools]" in text
    assert "at most" not in render(plan_human(example_plan()))  # cuda_ipc reuses its feature pool


def test_the_one_line_plan_of_validate_gives_the_larger_figure_too() -> None:
    from mmpool_cli.core.reports import FileResult
    from mmpool_cli.render.human import result_human

    text = render(result_human(FileResult("m.yaml", "mmpool", [], example_plan(transport="cuda_vmm")), False, False))
    line = " ".join(text.split())  # the console here wraps; mmpool's own is soft-wrapped
    assert "about 3,283,353,600 B (≈3.06 GiB) on GPU 0 with contexts" in line
    assert "at most 4,357,095,424 B (≈4.06 GiB) with the positional-embeds pools" in line
