"""simulate.curve: the budgets of a curve, the largest feature's budget, and every point an exact replay."""

from __future__ import annotations

from fractions import Fraction

from hypothesis import given, settings
from hypothesis import strategies as st

from mmpool_cli.core.units import MiB
from mmpool_cli.engines.sglang import versions
from mmpool_cli.engines.sglang.simulation import pool_rules
from mmpool_cli.pools.budget_search import smallest_budget
from mmpool_cli.pools.cuda_vmm import vmm_layout
from mmpool_cli.pools.curve import CurvePoint, budgets, decided, largest_alloc_budget, replay_budgets
from mmpool_cli.pools.executors import LocalExecutor
from mmpool_cli.pools.replay import ALLOC, FREE, PoolLayout, simulate
from mmpool_cli.pools.trials import Trial, no_miss_budget
from mmpool_cli.traces.events import as_events

REL = versions.release(versions.NEWEST)
TICK = 50_000_000


def layouts_for(transport: str, workers: int):
    def layouts(mb: int) -> PoolLayout:
        if transport == "cuda_vmm":
            return vmm_layout(workers, mb * MiB // workers, 2 * MiB, REL.vmm_lease_control_bytes(1), TICK, 256)
        return PoolLayout(workers, mb * MiB // workers, REL.header_bytes(1), TICK, pool_rules(REL))

    return layouts


@st.composite
def traces(draw):
    """Random traffic of features from 64 KiB to 24 MiB on one or two workers, some of a request together."""
    workers = draw(st.integers(1, 2))
    steps = draw(
        st.lists(
            st.tuples(
                st.booleans(),
                st.integers(0, 30_000_000),
                st.integers(1, 384),
                st.integers(0, workers - 1),
                st.integers(0, 10**6),
            ),
            max_size=50,
        )
    )
    events, live, t, n = [], [], 0, 0
    for is_alloc, dt, units, worker, pick in steps:
        t += dt
        if is_alloc or not live:
            ident = f"r{n // 2}/{n}"
            events.append((t, ALLOC, ident, units * 64 * 1024, worker))
            live.append(ident)
            n += 1
        else:
            events.append((t, FREE, live.pop(pick % len(live)), 0, 0))
    return workers, events


def test_budgets_spread_evenly_in_whole_mib_each_once() -> None:
    assert budgets(100, 163, 64) == list(range(100, 164))
    assert budgets(100, 120, 64) == list(range(100, 121))  # fewer whole MiB than points: each once
    assert budgets(10, 1000, 4) == [10, 340, 670, 1000]
    assert budgets(7, 7, 64) == [7]
    spread = budgets(48, 1353, 64)
    assert len(spread) == 64 and spread[0] == 48 and spread[-1] == 1353
    steps = {b - a for a, b in zip(spread, spread[1:], strict=False)}
    assert steps <= {20, 21}  # even: 1305 MiB over 63 gaps


def test_the_largest_feature_fits_from_its_budget_on_and_never_below() -> None:
    for transport in ("cuda_ipc", "cuda_vmm"):
        layouts = layouts_for(transport, 2)
        events = [(0, ALLOC, "a", 5 * MiB, 0), (1, ALLOC, "b", 50_633_856, 1), (2, FREE, "a", 0, 0)]
        need = largest_alloc_budget(events, layouts, 1, 4096)
        alone = [(0, ALLOC, "b", 50_633_856, 0)]
        assert simulate(alone, layouts(need)).total("fallback_items") == 0, transport
        assert simulate(alone, layouts(need - 1)).total("fallback_items") == 1, transport
        # the whole trace needs at least as much: the default range is never reversed
        assert need <= no_miss_budget(events, layouts, 1, 4096)


def test_a_trace_without_allocs_starts_at_the_lowest_budget_and_none_fitting_is_past_the_top() -> None:
    layouts = layouts_for("cuda_ipc", 1)
    assert largest_alloc_budget([], layouts, 3, 10) == 3
    assert largest_alloc_budget([(0, ALLOC, "a", 64 * MiB, 0)], layouts, 1, 10) == 11


@settings(max_examples=60, deadline=None)
@given(traces(), st.integers(1, 200), st.integers(0, 200), st.sampled_from(["cuda_ipc", "cuda_vmm"]))
def test_every_point_is_the_replay_of_its_budget_alone(trace, lo: int, span: int, transport: str) -> None:
    workers, raw = trace
    layouts = layouts_for(transport, workers)
    lo = max(lo, 2 * workers)  # a cuda_vmm share holds at least one 2 MiB granule
    events = as_events(raw)
    mbs = budgets(lo, lo + span, 7)
    points = replay_budgets(events, layouts, mbs, top=lo + span, executor=LocalExecutor(1))
    assert [p.budget_mb for p in points] == mbs
    for p in points:
        alone = simulate(raw, layouts(p.budget_mb))
        expected = CurvePoint(
            p.budget_mb,
            alone.total("items"),
            alone.total("fallback_items"),
            alone.total("bytes"),
            alone.total("fallback_bytes"),
        )
        assert p == expected
        assert p.budget_bytes == p.budget_mb * MiB


def test_forked_workers_give_the_points_in_order_with_progress() -> None:
    raw = [(i * 1_000_000, ALLOC, f"r{i}", (i % 7 + 1) * 3 * MiB, i % 2) for i in range(40)]
    raw += [(40_000_000 + i, FREE, f"r{i}", 0, 0) for i in range(40)]
    layouts = layouts_for("cuda_ipc", 2)
    mbs = budgets(43, 600, 16)
    seen: list[int] = []
    forked = replay_budgets(as_events(raw), layouts, mbs, top=600, executor=LocalExecutor(2), progress=seen.append)
    here = replay_budgets(as_events(raw), layouts, mbs, top=600, executor=LocalExecutor(1))
    assert forked == here
    assert seen == list(range(1, len(mbs) + 1))
    assert forked[0].fallback_items > forked[-1].fallback_items == 0


class Counting(LocalExecutor):
    """This process, counting the budgets it replays."""

    def __init__(self) -> None:
        super().__init__(1)
        self.pieces: list[int] = []

    def run(self, work, pieces):
        self.pieces += [p.lo for p in pieces]
        return super().run(work, pieces)


@settings(max_examples=40, deadline=None)
@given(traces(), st.integers(0, 4), st.sampled_from(["cuda_ipc", "cuda_vmm"]))
def test_points_a_search_replayed_whole_are_taken_from_it_and_are_still_exact(trace, tenths, transport) -> None:
    workers, raw = trace
    layouts = layouts_for(transport, workers)
    events = as_events(raw)
    lowest, top = 2 * workers, 300
    found = smallest_budget(
        events, layouts=layouts, lowest=lowest, highest=top, target=Fraction(tenths, 10), executor=LocalExecutor(1)
    )
    mbs = budgets(lowest, top, 24)
    counting = Counting()
    taken = replay_budgets(events, layouts, mbs, top=top, executor=counting, known=found.trials)
    assert taken == replay_budgets(events, layouts, mbs, top=top, executor=LocalExecutor(1))
    reusable = [mb for mb in mbs if decided(found.trials, mb) is not None]
    assert sorted(counting.pieces) == [mb for mb in mbs if mb not in reusable]


def test_only_a_trial_that_replayed_the_whole_trace_decides_a_point() -> None:
    whole = Trial(100, 10, 1, 1000, 50, same_until_mb=120)
    stopped = Trial(130, 4, 2, 400, 80, same_until_mb=140, stopped=True)
    trials = [whole, stopped]
    assert [decided(trials, mb) for mb in (99, 100, 120, 121, 130, 140)] == [None, whole, whole, None, None, None]
    # an earlier whole trial that reaches past a later one decides the budgets it reaches
    assert decided([Trial(100, 10, 0, 1000, 0, same_until_mb=300), stopped], 200) is not None
