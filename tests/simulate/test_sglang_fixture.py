"""mmpool's simulator against offsets recorded from SGLang 0.5.23's own allocator methods.

The traces and offsets were written by ``benchmarks/record_sglang_offsets.py``, which runs the
wheel's ``StreamOrderedMmFeaturePool`` allocator and recycle methods unmodified (torch on the CPU);
this test needs neither SGLang nor a network.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mmpool_cli.engines.sglang import versions
from mmpool_cli.engines.sglang.simulation import pool_rules
from mmpool_cli.simulate.replay import PoolLayout, simulate
from mmpool_cli.simulate.trace import read_trace

DATA = Path(__file__).parent / "data" / "sglang-0.5.23"
REL = versions.release(DATA.name.removeprefix("sglang-"))  # the release the fixture was recorded from
CASES = json.loads((DATA / "offsets.json").read_text())["cases"]


@pytest.mark.parametrize("case", CASES, ids=[c["trace"] for c in CASES])
def test_offsets_match_sglangs_allocator(case: dict) -> None:
    events = read_trace(str(DATA / case["trace"]), workers=case["workers"])
    layout = PoolLayout(
        case["workers"],
        case["memory_size"],
        REL.header_bytes(case["consumers"]),
        case["recycle_interval_ns"],
        pool_rules(REL),
    )
    result = simulate(events, layout, record=True)
    assert result.offsets == case["offsets"]
    assert result.total("fallback_items") == case["offsets"].count(None)


def test_the_fixture_exercises_misses_of_both_kinds() -> None:
    # guard against a re-recorded fixture that no longer tests what it should
    assert sum(c["offsets"].count(None) for c in CASES) > 500
    assert len(CASES[-1]["offsets"]) > 4096
