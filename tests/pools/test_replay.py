"""The replay over W pools: tick timing, misses, round-robin workers and the figures it reports."""

from __future__ import annotations

import dataclasses

from hypothesis import given, settings
from hypothesis import strategies as st

from mmpool_cli.core.units import MiB
from mmpool_cli.engines.sglang import versions
from mmpool_cli.engines.sglang.simulation import pool_rules
from mmpool_cli.pools.cuda_vmm import vmm_layout
from mmpool_cli.pools.replay import ALLOC, FREE, PoolLayout, simulate

REL = versions.release(versions.NEWEST)
RULES = pool_rules(REL)

TICK = 50_000_000  # 0.05 s in nanoseconds
ONE = PoolLayout(
    workers=1, memory_size=MiB + 32_768, data_start=32_768, recycle_ns=TICK, rules=RULES
)  # room for one MiB


def test_a_free_is_given_back_at_the_first_tick_at_or_after_it() -> None:
    events = [
        (10_000_000, ALLOC, "a", MiB, 0),
        (TICK, FREE, "a", 0, 0),  # acknowledged exactly on the tick at 0.05 s
        (TICK, ALLOC, "b", MiB, 0),  # same instant: the tick runs after every event stamped at it
        (TICK + 1, ALLOC, "c", MiB, 0),  # one nanosecond later the space is back
    ]
    result = simulate(events, ONE, record=True)
    assert result.offsets == [32_768, None, 32_768]


def test_a_free_between_ticks_waits_for_the_next_one() -> None:
    events = [
        (0, ALLOC, "a", MiB, 0),
        (TICK + 1, FREE, "a", 0, 0),
        (2 * TICK, ALLOC, "b", MiB, 0),  # the tick at 0.1 s has not run yet
        (2 * TICK + 1, ALLOC, "c", MiB, 0),
    ]
    assert simulate(events, ONE, record=True).offsets == [32_768, None, 32_768]


def test_a_free_of_a_missed_lease_is_ignored() -> None:
    events = [
        (0, ALLOC, "a", MiB, 0),
        (0, ALLOC, "big", 2 * MiB, 0),
        (1, FREE, "big", 0, 0),
        (2 * TICK, ALLOC, "b", 1, 0),
    ]
    result = simulate(events, ONE, record=True)
    assert result.offsets == [32_768, None, None]
    st = result.workers[0]
    assert (st.items, st.fallback_items, st.fallback_bytes) == (3, 2, 2 * MiB + 1)
    assert (st.slot_cap_misses, st.fragmented_misses, st.space_miss_free_bytes) == (0, 0, 0)


def test_requests_land_in_the_pool_of_their_worker() -> None:
    layout = PoolLayout(workers=2, memory_size=MiB + 32_768, data_start=32_768, recycle_ns=TICK, rules=RULES)
    events = [(0, ALLOC, "a", MiB, 0), (0, ALLOC, "b", MiB, 1), (0, ALLOC, "c", MiB, 1)]
    result = simulate(events, layout, record=True)
    assert result.offsets == [32_768, 32_768, None]
    assert result.alloc_workers == [0, 1, 1]
    assert [w.fallback_items for w in result.workers] == [0, 1]


def test_occupancy_peak_and_time_weighted_mean() -> None:
    layout = PoolLayout(workers=1, memory_size=4 * MiB, data_start=32_768, recycle_ns=TICK, rules=RULES)
    events = [
        (0, ALLOC, "a", MiB, 0),
        (TICK, ALLOC, "b", MiB, 0),
        (TICK, FREE, "a", 0, 0),  # given back at the tick at 0.05 s
        (3 * TICK, FREE, "b", 0, 0),  # and b at 0.15 s, the last event
    ]
    result = simulate(events, layout)
    st = result.workers[0]
    assert (st.peak_bytes, st.peak_leases) == (2 * MiB, 2)
    # 1 MiB over [0, 0.05), then 1 MiB (b in, a out at the same tick) over [0.05, 0.15)
    assert result.duration_ns == 3 * TICK
    assert st.occupancy_area == MiB * 3 * TICK


def test_a_miss_with_enough_free_bytes_in_pieces_counts_as_fragmented() -> None:
    layout = PoolLayout(workers=1, memory_size=3 * 256 + 256, data_start=256, recycle_ns=TICK, rules=RULES)
    events = [
        (0, ALLOC, "a", 256, 0),
        (0, ALLOC, "b", 256, 0),
        (0, ALLOC, "c", 256, 0),
        (0, FREE, "a", 0, 0),
        (0, FREE, "c", 0, 0),
        (TICK + 1, ALLOC, "d", 512, 0),  # 512 bytes free, in two pieces around b
    ]
    st = simulate(events, layout).workers[0]
    assert (st.fallback_items, st.fragmented_misses, st.space_miss_free_bytes, st.space_miss_largest_free) == (
        1,
        1,
        512,
        256,
    )


@st.composite
def _traces(draw):
    workers = draw(st.integers(1, 2))
    steps = draw(
        st.lists(
            st.tuples(st.booleans(), st.integers(0, 3), st.integers(1, 12), st.integers(0, 1), st.integers(0, 99)),
            max_size=50,
        )
    )
    events, live, t = [], [], 0
    for n, (is_alloc, dt, size, worker, pick) in enumerate(steps):
        t += dt
        if is_alloc or not live:
            events.append((t, ALLOC, f"r{n // 2}/{n}", size * 256, worker % workers))
            live.append(f"r{n // 2}/{n}")
        else:
            events.append((t, FREE, live.pop(pick % len(live)), 0, 0))
    return workers, events


def _layout(workers: int, transport: str, size: int) -> PoolLayout:
    if transport == "cuda_vmm":
        return vmm_layout(workers, size, 256, 256, 4, 256)
    return PoolLayout(workers, size, 512, 4, RULES)


@settings(max_examples=300, deadline=None)
@given(_traces(), st.integers(2, 24), st.integers(0, 6), st.booleans(), st.sampled_from(["cuda_ipc", "cuda_vmm"]))
def test_a_stopped_run_is_the_full_run_cut_after_the_alloc_that_passed_the_limit(
    trace, units, limit, by_bytes, transport
) -> None:
    workers, events = trace
    layout = _layout(workers, transport, 512 + 256 * units)
    full = simulate(events, layout, record=True)
    stop = {"stop_fallback_bytes": limit * 256} if by_bytes else {"stop_fallback_items": limit}
    run = simulate(events, layout, record=True, **stop)
    allocs = [i for i, e in enumerate(events) if e[1] == ALLOC]
    missed, over = 0, None
    for n, (i, offset) in enumerate(zip(allocs, full.offsets, strict=True)):
        if offset is None:
            missed += events[i][3] if by_bytes else 1
            if missed > (limit * 256 if by_bytes else limit):
                over = n
                break
    if over is None:  # the limit is never passed: the whole run, unchanged
        assert not run.stopped
        assert run == full
        return
    assert run.stopped
    assert run.events == allocs[over] + 1
    assert run.offsets == full.offsets[: over + 1]  # no decision changes before the stop
    assert run.total("fallback_items") == full.offsets[: over + 1].count(None)
    assert run.duration_ns == events[allocs[over]][0]
    cut = simulate(events[: run.events], layout, record=True)
    if transport == "cuda_ipc":  # a cut inside a request would pack it otherwise under cuda_vmm
        assert dataclasses.replace(run, stopped=False) == cut
    # every pool within the prefix's slack decides the prefix alike, so it passes the limit too
    grown = max(0, min(run.slack_bytes, 1 << 16) - 1)
    if transport == "cuda_vmm":
        grown -= grown % 256  # the pool is the share rounded down to the granularity
    bigger = simulate(events, _layout(workers, transport, layout.memory_size + grown), record=True, **stop)
    assert bigger.stopped
    assert bigger.offsets == run.offsets
