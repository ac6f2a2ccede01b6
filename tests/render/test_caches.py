"""``mmpool cache``'s report: which method made each curve, only sizes whose hits are known, every size
with its unit, aligned columns, and the JSON every command's has."""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from mmpool_cli.caches.replay import ONE_PASS, REPLAYED
from mmpool_cli.caches.report import CacheItem
from mmpool_cli.engines.sglang.caches import caches
from mmpool_cli.inputs.traffic.cache_request import CacheRequest, ModelShape
from mmpool_cli.render.caches import _sizes, cache_human, to_json
from mmpool_cli.workload.families import family

FIXTURE = json.loads((Path(__file__).parents[1] / "data" / "sglang_caches.json").read_text())
SCENARIOS = {sc["name"]: sc for sc in FIXTURE["scenarios"]}
PATCH_DIM = {"qwen2.5-vl": 3 * 2 * 14 * 14, "qwen3-vl": 3 * 2 * 16 * 16}


def request(sc: dict[str, Any]) -> CacheRequest:
    fam = family(sc["family"])
    items = [
        CacheItem(f"r{n}", it["kind"], it["key"], it["tokens"] * 4 * PATCH_DIM[sc["family"]] * 4, it["kind"])
        for n, req in enumerate(sc["requests"])
        for it in req
    ]
    return CacheRequest(
        family=fam,
        settings=dict(fam.settings),
        items=items,
        source=sc["name"],
        shape=ModelShape(sc["hidden_size"], 3 if sc["family"] == "qwen3-vl" else None),
        environ={"SGLANG_VLM_CACHE_SIZE_MB": "100"},
        preprocess_mb=1,
    )


def text_of(report: Any, width: int = 80) -> str:
    console = Console(width=width, record=True, color_system=None)
    console.print(cache_human(report))
    return console.export_text()


def test_a_replayed_curve_shows_its_points_only() -> None:
    report = caches(request(SCENARIOS["qwen2.5-vl multi-turn chats"]))
    text = text_of(report)
    assert text.count(f"hits by size ({REPLAYED})") == 2
    for c in report.caches:
        points = {s for s, _, _ in c.curve.steps}
        top = c.curve.steps[-1][0]
        shown = _sizes(c)
        assert c.size_bytes in shown and (c.recommendation is None or c.recommendation.size_bytes in shown)
        assert all(s in points or s >= top for s in shown)


def test_a_one_pass_curve_says_so() -> None:
    sc = dict(SCENARIOS["qwen3-vl a video and an item larger than the cache"])
    sc["requests"] = [r for r in sc["requests"] if len(r) == 1]
    text = text_of(caches(request(sc)))
    assert len(re.findall(re.escape(f"hits by size ({ONE_PASS})"), text)) == 2


def _block(text: str, title: str) -> list[str]:
    lines = text.splitlines()
    start = lines.index(title) + 1
    end = next(i for i in range(start, len(lines)) if lines[i].startswith("hits by size"))
    return lines[start:end]


@pytest.mark.parametrize("width", [80, 120])
def test_every_figure_has_its_unit_and_the_columns_align(width: int) -> None:
    # as vLLM's report reads: sizes in bytes with their binary reading, costs in words, values in one column
    sc = SCENARIOS["qwen2.5-vl multi-turn chats"]
    req = request(sc)
    report = caches(dataclasses.replace(req, shape=ModelShape(sc["hidden_size"], None, kv_cell_bytes=4096)))
    text = text_of(report, width)
    assert not re.search(r"\b[a-z]+_[a-z_]+\b", text), text  # no JSON key (gpu_bytes_per_rank) printed as text
    assert "(-)" not in text
    for title in ("Embedding cache (GPU, scheduler)", "Preprocess cache (host, each tokenizer process)"):
        block = _block(text, title)
        keyed = [line for line in block if not line.startswith(" ")]
        columns = {len(line) - len(line.split("  ", 1)[1].lstrip()) for line in keyed if "  " in line}
        assert len(columns) == 1, keyed  # every value starts in one column
        costs = " ".join(line.strip() for line in block if line.startswith(("costs", " ")))
        assert re.search(r"of GPU memory per rank|of host RAM per tokenizer process", costs), costs
    emb = " ".join(" ".join(_block(text, "Embedding cache (GPU, scheduler)")).split())
    assert "KV tokens per rank" in emb and "encoder tokens" in emb


def test_an_off_cache_says_so_and_the_warning_ends_with_what_to_set() -> None:
    sc = SCENARIOS["qwen2.5-vl multi-turn chats"]
    req = request(sc)
    report = caches(dataclasses.replace(req, preprocess_mb=None))
    text = " ".join(text_of(report, 200).split())
    assert "hits none: the cache is off" in text and "hits 0 (-)" not in text
    below = [n.message for n in report.notes if n.code == "cache-below-target"]
    assert below and all(re.search(r"reaches it \([0-9,]+ B( \(.*\))?\)$", m) for m in below), below


def test_the_json_is_versioned_as_every_commands() -> None:
    report = caches(request(SCENARIOS["qwen2.5-vl multi-turn chats"]))
    data = json.loads(to_json(report))
    assert (data["schema_version"], data["status"]) == (1, "ok" if all(c.meets_target() for c in report.caches) else "fail")
    assert "schema" not in data and "verdict" not in data
