"""pools.curve_range: the range from the traffic and the engine's bounds, each point's KV tokens from the engine."""

from __future__ import annotations

import pytest

from mmpool_cli.cli.pool_options import PoolOptions
from mmpool_cli.core.units import MiB
from mmpool_cli.engines import engine
from mmpool_cli.errors import MmpoolError
from mmpool_cli.pools.budget_search import smallest_budget
from mmpool_cli.pools.curve_range import CurveRange, pool_curve
from mmpool_cli.pools.executors import LocalExecutor
from mmpool_cli.pools.replay import ALLOC, FREE
from mmpool_cli.traces.events import as_events

# examples/trace.jsonl: two 48.29 MiB images and a 21.93 MiB one on two workers
EVENTS = as_events(
    [
        (0, ALLOC, "req1/img0", 50_633_856, 0),
        (4_000_000, ALLOC, "req2/img0", 50_633_856, 1),
        (21_000_000, FREE, "req1/img0", 0, 0),
        (30_000_000, ALLOC, "req3/img0", 22_993_152, 0),
        (52_000_000, FREE, "req2/img0", 0, 0),
        (60_000_000, FREE, "req3/img0", 0, 0),
    ]
)
POOLS = engine().simulation_setup(PoolOptions(workers=2, tp=2).request({}), {})


def curve(wanted: CurveRange, kv_tokens=None):
    return pool_curve(wanted, EVENTS, POOLS, executor=LocalExecutor(1), kv_tokens=kv_tokens)


def test_the_default_range_runs_from_the_largest_features_need_to_the_no_miss_budget() -> None:
    made = curve(CurveRange(points=8))
    assert (made.lo_mb, made.hi_mb, made.feature_mb, made.no_miss_mb) == (97, 141, 97, 141)
    assert not made.lo_given and not made.hi_given
    assert [p.budget_mb for p in made.points] == [97, 103, 109, 115, 122, 128, 134, 141]
    assert [p.fallback_items for p in made.points] == [1] * 7 + [0]
    assert all(p.kv_tokens is None for p in made.points)  # no model: unknown, never 0


def test_each_point_takes_the_kv_tokens_the_engine_gives_for_its_budget() -> None:
    made = curve(CurveRange(100, 102), kv_tokens=lambda mb: mb * 7)
    assert [(p.budget_mb, p.kv_tokens) for p in made.points] == [(100, 700), (101, 707), (102, 714)]
    assert made.to_data()["from_bytes"] == 100 * MiB and made.lo_given and made.hi_given


@pytest.mark.parametrize(
    ("wanted", "message"),
    [
        (CurveRange(0, None, "0:"), "--curve '0:': the lower bound, 0 MiB, is below the smallest budget"),
        (CurveRange(None, 300_000, ":300000MiB"), "the upper bound, 300000 MiB, is above the largest budget plan"),
        (CurveRange(150, None, "150MiB:"), "the lower bound is above 141 MiB, the budget from which no alloc"),
        (CurveRange(None, 96, ":96MiB"), "the largest feature of the traffic needs 97 MiB, above the upper bound"),
    ],
)
def test_a_range_the_engine_or_the_traffic_rules_out_is_a_usage_error(wanted: CurveRange, message: str) -> None:
    with pytest.raises(MmpoolError) as e:
        curve(wanted)
    assert message in str(e.value) and e.value.exit_code == 2


def test_a_feature_no_budget_holds_needs_the_range_given() -> None:
    huge = as_events([(0, ALLOC, "a", 200 << 30, 0)])  # 200 GiB: more than a worker's half of any GPU
    with pytest.raises(MmpoolError) as e:
        pool_curve(CurveRange(), huge, POOLS, executor=LocalExecutor(1))
    assert str(e.value).startswith("--curve: the largest feature of the traffic fits no budget up to the largest")
    given = pool_curve(CurveRange(1024, 2048, points=2), huge, POOLS, executor=LocalExecutor(1))
    assert [p.fallback_items for p in given.points] == [1, 1]


def test_the_points_a_search_replayed_whole_are_not_replayed_again() -> None:
    found = smallest_budget(EVENTS, layouts=POOLS.layouts, lowest=POOLS.lowest_mb, highest=POOLS.highest_mb)
    wanted = CurveRange(points=8)
    made = pool_curve(wanted, EVENTS, POOLS, executor=LocalExecutor(1), known=found.trials)
    assert made.points == curve(wanted).points
    assert found.smallest_mb == 141 and made.points[-1].budget_mb == 141  # the search replayed 141 whole
    assert made.replayed == 7 and curve(wanted).replayed == 8
