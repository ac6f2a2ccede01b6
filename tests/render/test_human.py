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
