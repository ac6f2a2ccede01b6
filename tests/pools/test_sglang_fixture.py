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
from mmpool_cli.pools.replay import PoolLayout, simulate
from mmpool_cli.traces.reader import read_trace

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


VMM = DATA / "vmm"
VMM_CASES = json.loads((VMM / "offsets.json").read_text())["cases"]


@pytest.mark.parametrize("case", VMM_CASES, ids=[c["trace"] for c in VMM_CASES])
def test_vmm_offsets_match_sglangs_transport(case: dict) -> None:
    # recorded from SGLang's wrap_items, wrap_tensors, _reserve_chunk and _recycle_chunks
    from array import array

    from mmpool_cli.pools.cuda_vmm import vmm_layout
    from mmpool_cli.traces.events import as_events

    events = as_events(read_trace(str(VMM / case["trace"]), workers=case["workers"]))
    events.elem = array("b", [0] * len(events))
    events.pack = array("b", [0] * len(events))
    allocs = [i for i, op in enumerate(events.op) if op == 0]
    for i, elem, visual in zip(allocs, case["element_sizes"], case["visual"], strict=True):
        events.elem[i], events.pack[i] = elem, visual
    rel = versions.release(versions.NEWEST)
    control = rel.vmm_lease_control_bytes(case["consumers"])
    layout = vmm_layout(
        case["workers"], case["per_worker"], case["granularity"], control, case["recycle_interval_ns"], 256
    )
    result = simulate(events, layout, record=True)
    assert result.offsets == case["offsets"]
    assert result.total("fallback_items") == case["offsets"].count(None)


def test_the_vmm_fixture_packs_and_falls_back() -> None:
    # requests of several tensors at one t, and misses: packing and the per-tensor fallback both ran
    assert sum(c["offsets"].count(None) for c in VMM_CASES) > 500
    assert all(len(c["offsets"]) > 300 for c in VMM_CASES)
