"""``mmpool cache``'s table: which method made each curve, and only sizes whose hits are known."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from mmpool_cli.caches.replay import ONE_PASS, REPLAYED
from mmpool_cli.caches.report import CacheItem
from mmpool_cli.engines.sglang.caches import caches
from mmpool_cli.inputs.traffic.cache_request import CacheRequest, ModelShape
from mmpool_cli.render.caches import _sizes, cache_text
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


def test_a_replayed_curve_shows_its_points_only() -> None:
    report = caches(request(SCENARIOS["qwen2.5-vl multi-turn chats"]))
    text = cache_text(report)
    assert text.count(f"size → hits ({REPLAYED})") == 2
    for c in report.caches:
        points = {s for s, _, _ in c.curve.steps}
        top = c.curve.steps[-1][0]
        shown = _sizes(c)
        assert c.size_bytes in shown and (c.recommendation is None or c.recommendation.size_bytes in shown)
        assert all(s in points or s >= top for s in shown)


def test_a_one_pass_curve_says_so() -> None:
    sc = dict(SCENARIOS["qwen3-vl a video and an item larger than the cache"])
    sc["requests"] = [r for r in sc["requests"] if len(r) == 1]
    text = cache_text(caches(request(sc)))
    assert len(re.findall(re.escape(f"size → hits ({ONE_PASS})"), text)) == 2
