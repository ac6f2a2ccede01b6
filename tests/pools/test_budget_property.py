"""Properties of the budget search on random traces: the safe budget, and the runs it skips."""

from __future__ import annotations

import dataclasses
from fractions import Fraction

from hypothesis import given, settings
from hypothesis import strategies as st

from mmpool_cli.core.units import MiB
from mmpool_cli.engines.sglang import versions
from mmpool_cli.engines.sglang.simulation import pool_rules
from mmpool_cli.pools import budget_search as budget
from mmpool_cli.pools.budget_search import layout_for
from mmpool_cli.pools.cuda_vmm import vmm_layout
from mmpool_cli.pools.replay import ALLOC, FREE, PoolLayout, simulate

REL = versions.release(versions.NEWEST)
RULES = pool_rules(REL)
ipc_header_bytes = REL.header_bytes

TICK = 4


@st.composite
def traces(draw, unit: int = 256, most: int = 3000):
    workers = draw(st.integers(1, 2))
    steps = draw(
        st.lists(
            st.tuples(
                st.booleans(),
                st.integers(0, 5),
                st.integers(1, most),
                st.integers(0, workers - 1),
                st.integers(0, 10**6),
            ),
            max_size=60,
        )
    )
    events, live, t, next_id = [], [], 0, 0
    for is_alloc, dt, size, worker, pick in steps:
        t += dt
        if is_alloc or not live:
            events.append((t, ALLOC, f"r{next_id // 2}/{next_id}", size * unit, worker))
            live.append(f"r{next_id // 2}/{next_id}")
            next_id += 1
        else:
            events.append((t, FREE, live.pop(pick % len(live)), 0, 0))
    return workers, events


@settings(max_examples=300, deadline=None)
@given(traces(), st.integers(1, 40), st.sampled_from(["cuda_ipc", "cuda_vmm"]))
def test_every_pool_within_the_slack_decides_every_alloc_alike(trace, units, transport) -> None:
    workers, events = trace

    def layout(size: int) -> PoolLayout:
        if transport == "cuda_vmm":
            return vmm_layout(workers, size, 256, 256, TICK, 256)
        return PoolLayout(workers, size, 512, TICK, RULES)

    base = layout(512 + 256 * units)
    result = simulate(events, base, record=True)
    slack = min(result.slack_bytes, 64 * 256)
    for grow in sorted({0, 1, slack // 2, slack - 1} - {-1}):
        bigger = simulate(events, layout(base.memory_size + grow), record=True)
        assert bigger.offsets == result.offsets


def _meets(events, mb, layouts, target) -> bool:
    return budget.trial(events, mb, layouts).rate("items") <= target


@settings(max_examples=60, deadline=None)
@given(
    traces(unit=MiB // 8, most=40),
    st.sampled_from([Fraction(0), Fraction(1, 10), Fraction(1, 4)]),
    st.sampled_from(["cuda_ipc", "cuda_vmm"]),
)
def test_the_safe_budget_meets_the_target_up_to_the_top_and_is_the_smallest_that_does(trace, target, transport) -> None:
    workers, events = trace

    def layouts(mb: int) -> PoolLayout:
        if transport == "cuda_vmm":
            return vmm_layout(workers, mb * MiB // workers, 1 << 20, 256, TICK, 256)
        return layout_for(mb, workers, ipc_header_bytes(2), TICK, RULES)

    lowest, highest = REL.smallest_valid_budget_mb(workers, transport, 2, 1 << 20), 48
    search = budget.smallest_budget(events, layouts=layouts, lowest=lowest, highest=highest, target=target, jobs=1)
    top = search.top_mb
    assert top == min(search.no_miss_mb, highest)
    if search.smallest_mb is None:
        assert not _meets(events, top, layouts, target)
        return
    safe, upper = search.smallest_mb, search.upper_mb
    assert upper == min(2 * safe, top)
    assert all(_meets(events, mb, layouts, target) for mb in range(safe, upper + 1))
    meets = {mb: _meets(events, mb, layouts, target) for mb in range(lowest, top + 1)}
    for mb in range(lowest, safe):  # no smaller budget has every budget up to its own top meeting
        assert not all(meets[x] for x in range(mb, min(2 * mb, top) + 1))
    lowest_meeting = min(mb for mb in meets if meets[mb])
    assert search.fragile_mb == (lowest_meeting if lowest_meeting < safe else None)
    for tr in search.trials:  # a stopped trial fails, and so does every budget its prefix decides alike
        if tr.stopped:
            assert tr.rate("items") > target
            assert not any(meets[mb] for mb in range(tr.mb, min(tr.same_until_mb, top) + 1))
    assert not search.trials[-1].stopped  # the top runs whole
    if search.no_miss_mb <= highest:  # from there on every budget makes the same run, with no miss for space
        at = simulate(events, layouts(search.no_miss_mb), record=True)
        assert at.total("fallback_items") == 0
        assert simulate(events, layouts(highest + 7), record=True).offsets == at.offsets


@settings(max_examples=80, deadline=None)
@given(
    traces(unit=MiB // 8, most=40),
    st.sampled_from([Fraction(0), Fraction(1, 10), Fraction(1, 4)]),
    st.sampled_from(["items", "bytes"]),
    st.sampled_from(["safe", "scan", "bisect"]),
    st.sampled_from(["cuda_ipc", "cuda_vmm"]),
)
def test_stopping_trials_early_never_changes_the_answer(trace, target, basis, method, transport) -> None:
    workers, events = trace

    def layouts(mb: int) -> PoolLayout:
        if transport == "cuda_vmm":
            return vmm_layout(workers, mb * MiB // workers, 1 << 20, 256, TICK, 256)
        return layout_for(mb, workers, ipc_header_bytes(2), TICK, RULES)

    lowest = REL.smallest_valid_budget_mb(workers, transport, 2, 1 << 20)
    options = {"layouts": layouts, "lowest": lowest, "highest": 48, "target": target, "basis": basis, "jobs": 1}
    fast = budget.smallest_budget(events, method=method, **options)
    whole = budget.smallest_budget(events, method=method, early_stop=False, **options)
    answer = ("smallest_mb", "upper_mb", "fragile_mb", "top_mb", "no_miss_mb", "exact", "checked_mb")
    assert [getattr(fast, k) for k in answer] == [getattr(whole, k) for k in answer]
    assert not any(t.stopped for t in whole.trials)
    full = {t.mb: t for t in whole.trials}
    for tr in fast.trials:
        if tr.stopped:  # its rate is a lower bound of the whole run's, above the target
            assert target < tr.rate(basis) <= budget.trial(events, tr.mb, layouts).rate(basis)
        elif tr.mb in full:
            assert tr == dataclasses.replace(full[tr.mb], same_until_mb=tr.same_until_mb)


@settings(max_examples=60, deadline=None)
@given(
    traces(unit=MiB // 8, most=40),
    st.sampled_from([Fraction(0), Fraction(1, 10)]),
    st.lists(st.integers(0, 60), max_size=8),
    st.sampled_from(["safe", "scan"]),
    st.sampled_from(["cuda_ipc", "cuda_vmm"]),
)
def test_the_curve_s_replays_known_beforehand_never_change_a_proven_answer(
    trace, target, at, method, transport
) -> None:
    """``--curve`` seeds the search of its mark with its whole replays: the answer proven is the same, and
    where the limit stops the proof, what it says was checked is so, each budget replayed alone."""
    from mmpool_cli.pools.curve import replay_trials

    workers, events = trace

    def layouts(mb: int) -> PoolLayout:
        if transport == "cuda_vmm":
            return vmm_layout(workers, mb * MiB // workers, 1 << 20, 256, TICK, 256)
        return layout_for(mb, workers, ipc_header_bytes(2), TICK, RULES)

    lowest = REL.smallest_valid_budget_mb(workers, transport, 2, 1 << 20)
    options = {"layouts": layouts, "lowest": lowest, "highest": 48, "target": target, "method": method, "jobs": 1}
    alone = budget.smallest_budget(events, **options)
    mbs = sorted({lowest + x for x in at if lowest + x <= 48})
    known = replay_trials(budget.as_events(events), layouts, mbs, top=48, executor=budget.LocalExecutor(1))
    seeded = budget.smallest_budget(events, known=known, **options)
    answer = ("smallest_mb", "upper_mb", "fragile_mb", "top_mb", "no_miss_mb", "exact")
    assert [getattr(seeded, k) for k in answer] == [getattr(alone, k) for k in answer]
    assert {t.mb for t in known} <= {t.mb for t in seeded.trials}
    n = len(events)
    bounded = budget.smallest_budget(events, known=known, max_events=n, **options)  # one replay past the estimate
    if bounded.exact:
        assert [getattr(bounded, k) for k in answer] == [getattr(alone, k) for k in answer]
        return
    lo, hi = bounded.checked_mb
    assert all(_meets(events, mb, layouts, target) for mb in range(lo, hi + 1))
    count, first, last = bounded.undecided
    decided = {mb for mb in range(first, last + 1) if any(t.mb <= mb <= t.same_until_mb for t in bounded.trials)}
    assert count == last - first + 1 - len(decided) > 0
