"""The prefix replay against SGLang 0.5.23's own RadixCache and vLLM 0.34.0's own KVCacheManager.

tests/data/prefix_fixtures.json was made by scripts/record_prefix_fixtures.py, which drives those
classes with each scenario's token sequences in the same order of admission and release; here
``replay`` must serve each request the tokens the engine served, at every capacity recorded.
"""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import Any

import pytest

from mmpool_cli.caches.prefix import Blocks, PrefixRequest, Radix, curve, replay

from . import prefix_reference

DATA = Path(__file__).resolve().parent.parent / "data" / "prefix_fixtures.json"


@cache
def fixtures() -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(DATA.read_text())
    return doc


def requests(scenario: dict[str, Any], engine: str) -> list[PrefixRequest]:
    """Each request's tokens as the engine saw them: its parent's prompt and output, then its own;
    vLLM's items (start, length, hash) where the placeholders lie."""
    out: list[PrefixRequest] = []
    for r in scenario["requests"]:
        if r["parent"] is None:
            toks: list[int] = []
            items: list[tuple[int, int, str]] = []
        else:
            p = out[r["parent"]]
            toks = [*p.tokens, *p.output]
            items = list(p.extra)
        base = len(toks)
        items += [(base + s, ln, h) for s, ln, h in r["items"]]
        toks += r[engine]
        extra = tuple(items) if engine == "vllm" else ()
        out.append(PrefixRequest(tuple(toks), tuple(r["output"]), extra, r["arrive"], r["finish"]))
    return out


def cases(engine: str) -> list[Any]:
    return [
        pytest.param(s, point, id=f"{s['name']}-{'-'.join(str(v) for k, v in point.items() if k != 'served')}")
        for s in fixtures()["scenarios"]
        for point in s[engine]
    ]


def test_the_fixtures_cover_what_the_replay_must_follow() -> None:
    scen = fixtures()["scenarios"]
    assert {fixtures()["sglang"], fixtures()["vllm"]} == {"0.5.23", "0.34.0"}
    for engine, cap in (("sglang", "capacity_tokens"), ("vllm", "num_blocks")):
        points = [p for s in scen for p in s[engine]]
        # several capacities per scenario, some served less than the largest: evictions under pressure
        assert all(len({p[cap] for p in s[engine]}) >= 3 for s in scen)
        assert any(sum(p["served"]) < max(sum(q["served"]) for q in s[engine]) for s in scen for p in s[engine])
        assert sum(sum(p["served"]) for p in points) > 0
    # multi-turn chats with images: a request extends an earlier one, and carries items
    assert any(r["parent"] is not None and r["items"] for s in scen for r in s["requests"])
    assert {p["page_size"] for s in scen for p in s["sglang"]} == {1, 16}


@pytest.mark.parametrize(("scenario", "point"), cases("sglang"))
def test_the_radix_replay_serves_what_sglangs_radix_cache_served(
    scenario: dict[str, Any], point: dict[str, Any]
) -> None:
    reqs = requests(scenario, "sglang")
    cache = Radix(point["capacity_tokens"], point["page_size"])
    assert replay(reqs, cache) == point["served"]
    assert prefix_reference.replay(reqs, cache) == point["served"]


@pytest.mark.parametrize(("scenario", "point"), cases("vllm"))
def test_the_block_replay_serves_what_vllms_kv_cache_manager_served(
    scenario: dict[str, Any], point: dict[str, Any]
) -> None:
    reqs = requests(scenario, "vllm")
    cache = Blocks(point["num_blocks"], point["block_size"])
    assert replay(reqs, cache) == point["served"]
    assert prefix_reference.replay(reqs, cache) == point["served"]


@pytest.mark.parametrize("name", [s["name"] for s in fixtures()["scenarios"]])
def test_the_curve_gives_the_engines_totals_at_their_capacities(name: str) -> None:
    (s,) = [s for s in fixtures()["scenarios"] if s["name"] == name]
    for page in (1, 16):
        pts = [p for p in s["sglang"] if p["page_size"] == page]
        got = curve(requests(s, "sglang"), Radix, [p["capacity_tokens"] for p in pts], page_size=page)
        assert got == [sum(p["served"]) for p in pts]
    got = curve(requests(s, "vllm"), Blocks, [p["num_blocks"] for p in s["vllm"]], block_size=16)
    assert got == [sum(p["served"]) for p in s["vllm"]]
