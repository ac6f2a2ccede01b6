"""The simulation report: the fallback rate against the target, and its versioned JSON payload."""

from __future__ import annotations

from fractions import Fraction

from mmpool_cli.core.reports import Settings
from mmpool_cli.core.units import MiB
from mmpool_cli.engines.sglang import versions
from mmpool_cli.engines.sglang.simulation import pool_rules
from mmpool_cli.pools.budget_search import layout_for, smallest_budget
from mmpool_cli.pools.replay import ALLOC, FREE, PoolLayout, simulate
from mmpool_cli.pools.report import SimulationReport, result_data, search_data
from mmpool_cli.render import render

REL = versions.release(versions.NEWEST)
RULES = pool_rules(REL)
TICK = 50_000_000
HEADER = REL.header_bytes(1)
# three 6 MiB features at once into a pool that holds two: one falls back
EVENTS = [(0, ALLOC, i, 6 * MiB, 0) for i in range(3)] + [(1, FREE, i, 0, 0) for i in (0, 1)]


def report(target: Fraction = Fraction(0), basis: str = "items") -> SimulationReport:
    layout = PoolLayout(1, 12 * MiB + HEADER, HEADER, TICK, RULES)
    return SimulationReport(
        source={"trace": "t.jsonl"},
        budget_bytes=13 * MiB,
        sglang_mm_feature_cache_mb=13,
        tp_size=1,
        consumers=1,
        recycle_source="default",
        result=simulate(EVENTS, layout),
        refused=None,
        target=target,
        basis=basis,  # type: ignore[arg-type]
        transport=RULES.allocator,
        sglang_version=REL.version,
    )


def test_the_fallback_rate_by_items_and_by_bytes() -> None:
    assert report().fallback_rate() == Fraction(1, 3)
    assert report(basis="bytes").fallback_rate() == Fraction(1, 3)
    assert not report().meets_target
    assert report(target=Fraction(1, 3)).meets_target


def test_the_payload_carries_the_pools_and_the_counts() -> None:
    data = report().to_data()
    assert list(data)[:4] == ["schema_version", "status", "sglang_version", "sglang_version_chosen"]
    assert (data["status"], data["transport"], data["recycle_interval_ns"]) == ("fail", "cuda_ipc", TICK)
    assert data["items"] == {"total": 3, "fallback": 1, "fallback_rate": 1 / 3, "slot_cap_misses": 0, "space_misses": 1}
    assert data["max_inflight_slices"] == REL.max_inflight_slices
    assert data["target"] == {"basis": "items", "fallback_rate": 0.0, "met": False}
    assert "events" not in data and "smallest_budget" not in data


def test_a_refused_budget_has_no_figures() -> None:
    r = report()
    r.result, r.refused = None, "SGLang refuses this budget"
    data = r.to_data()
    assert (data["refused"], data["recycle_interval_ns"], r.fallback_rate()) == (
        "SGLang refuses this budget",
        None,
        None,
    )
    assert "items" not in data


def test_search_data_lists_every_trial() -> None:
    search = smallest_budget(
        EVENTS, layouts=lambda mb: layout_for(mb, 1, HEADER, TICK, RULES), lowest=1, highest=4096, jobs=1
    )
    data = search_data(search, Settings(env={"SGLANG_MM_FEATURE_CACHE_MB": str(search.smallest_mb)}, args=[]))
    assert data["sglang_mm_feature_cache_mb"] == search.smallest_mb == 19
    assert [t["mb"] for t in data["trials"]] == sorted(t["mb"] for t in data["trials"])
    assert (data["upper_mb"], data["fragile_mb"], data["exact"]) == (min(38, search.no_miss_mb), None, True)
    assert data["settings"] == {"env": {"SGLANG_MM_FEATURE_CACHE_MB": "19"}, "args": []}
    assert result_data(report().result)["per_worker"][0]["fallback"] == 1  # type: ignore[arg-type]


def test_the_human_rendering_says_fallback_and_the_numbers() -> None:
    out = render("simulate", "human", report())
    from rich.console import Console

    console = Console(width=100, color_system=None, record=True)
    console.print(out.renderable)  # type: ignore[union-attr]
    shown = console.export_text()
    assert "mmpool simulate: FALLBACK" in shown
    assert "1 of 3 (33.33%)" in shown


def test_a_stopped_trial_says_more_than_the_target_and_never_a_rate() -> None:
    # 6 MiB features, three at once, then 40 more one by one: small budgets pass the target
    events = EVENTS + [(2 * TICK + i, ALLOC, 10 + i, 6 * MiB, 0) for i in range(40)]
    r = report(target=Fraction(1, 100))
    r.search = smallest_budget(
        events,
        layouts=lambda mb: layout_for(mb, 1, HEADER, TICK, RULES),
        lowest=1,
        highest=4096,
        target=Fraction(1, 100),
        jobs=1,
    )
    stopped = [t for t in r.search.trials if t.stopped]
    assert any(t.events < len(events) for t in stopped) and not r.search.trials[-1].stopped
    data = search_data(r.search, None)
    for t, shown in zip(r.search.trials, data["trials"], strict=True):
        assert shown["stopped"] is t.stopped
        assert shown["events"] == t.events
        if t.stopped:  # the counts so far: the first miss past floor(1% of 43) = 0 ended it
            assert shown["fallback"] == 1
    from rich.console import Console

    console = Console(width=120, color_system=None, record=True)
    console.print(render("simulate", "human", r).renderable)  # type: ignore[union-attr]
    shown_text = console.export_text()
    assert "> 1% (1 so far)" in shown_text
    assert "the replay stopped once that budget's fallback passed the target" in shown_text
    assert " 1 / " not in shown_text.split("Smallest")[1]  # a stopped trial never shows as a rate
