"""The fast simulator against the straightforward reference, event by event, on random traces.

Both replays are checked: the pure-Python one (the reference implementation, what
``MMPOOL_PURE_PYTHON=1`` runs) and the compiled one where it was built.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Iterator

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mmpool_cli.engines.sglang import versions
from mmpool_cli.engines.sglang.simulation import pool_rules
from mmpool_cli.kernels import native
from mmpool_cli.pools.replay import ALLOC, FREE, PoolLayout, simulate

from .reference import reference_offsets

REL = versions.release(versions.NEWEST)
RULES = pool_rules(REL)

INTERVAL = 4


@st.composite
def traces(draw):
    workers = draw(st.integers(1, 3))
    data_start = draw(st.sampled_from([0, 256, 512]))
    memory_size = data_start + 256 * draw(st.integers(1, 48))
    max_slots = draw(st.integers(1, 12))
    steps = draw(
        st.lists(
            st.tuples(
                st.booleans(),  # alloc (or free, when something is live)
                st.integers(0, 5),  # time step in quarter intervals: lands on ticks and between them
                st.integers(1, 3000),  # bytes
                st.integers(0, workers - 1),
                st.integers(0, 10**6),  # which live id to free
            ),
            max_size=120,
        )
    )
    events = []
    live: list[int] = []
    t = 0
    next_id = 0
    for is_alloc, dt, nbytes, worker, pick in steps:
        t += dt
        if is_alloc or not live:
            events.append((t, ALLOC, next_id, nbytes, worker))
            live.append(next_id)
            next_id += 1
        else:
            events.append((t, FREE, live.pop(pick % len(live)), 0, 0))
    return workers, memory_size, data_start, max_slots, events


@contextlib.contextmanager
def replay_engine(engine: str) -> Iterator[None]:
    """Run ``simulate`` through one replay: ``python`` (as MMPOOL_PURE_PYTHON=1 does) or ``compiled``."""
    built = native.FAST
    if engine == "compiled" and built is None:
        pytest.skip("the compiled simulator was not built (no C compiler)")
    native.FAST = built if engine == "compiled" else None
    try:
        yield
    finally:
        native.FAST = built


@pytest.mark.parametrize("engine", ["python", "compiled"])
def test_offsets_match_the_reference(engine: str) -> None:
    with replay_engine(engine):
        _offsets_match_the_reference()


@settings(max_examples=400, deadline=None)
@given(traces())
def _offsets_match_the_reference(trace) -> None:
    workers, memory_size, data_start, max_slots, events = trace
    layout = PoolLayout(workers, memory_size, data_start, INTERVAL, dataclasses.replace(RULES, max_leases=max_slots))
    result = simulate(events, layout, record=True)
    expected = reference_offsets(events, workers, memory_size, data_start, INTERVAL, max_slots)
    assert result.offsets == expected
    assert result.total("items") == len(expected)
    assert result.total("fallback_items") == expected.count(None)
