"""The smallest budget: whole MiB, checked one MiB below, and the scan for non-monotonic cases."""

from __future__ import annotations

from fractions import Fraction

from mmpool_cli.core.units import MiB
from mmpool_cli.engines.sglang import versions
from mmpool_cli.engines.sglang.simulation import pool_rules
from mmpool_cli.simulate.budget_search import smallest_budget, trial
from mmpool_cli.simulate.replay import ALLOC, FREE
from mmpool_cli.simulate.synthetic import SyntheticWorkload, synthesize

REL = versions.release(versions.NEWEST)
RULES = pool_rules(REL)

TICK = 50_000_000


def test_the_smallest_budget_for_ten_six_mib_features_in_flight() -> None:
    # ten 6 MiB features in flight at once on one worker at TP=1: 60 MiB + the 32 KiB header
    events = [(0, ALLOC, i, 6 * MiB, 0) for i in range(10)] + [(1, FREE, i, 0, 0) for i in range(10)]
    search = smallest_budget(events, workers=1, data_start=REL.header_bytes(1), recycle_ns=TICK, rules=RULES)
    assert search.smallest_mb == 61
    by_mb = {t.mb: t for t in search.trials}
    assert by_mb[61].fallback_items == 0
    assert by_mb[60].fallback_items == 1


def test_two_workers_split_the_budget() -> None:
    events = [(0, ALLOC, i, 6 * MiB, i % 2) for i in range(10)]
    search = smallest_budget(events, workers=2, data_start=REL.header_bytes(1), recycle_ns=TICK, rules=RULES)
    assert search.smallest_mb == 61  # 30.5 MiB each: 5 x 6 MiB + the header


def test_a_target_rate_allows_some_fallback() -> None:
    events = [(0, ALLOC, i, 6 * MiB, 0) for i in range(10)]
    search = smallest_budget(events, workers=1, data_start=REL.header_bytes(1), recycle_ns=TICK, rules=RULES, target=Fraction(1, 5))
    assert search.smallest_mb == 49  # 8 of 10 fit
    assert search.trials[-1].rate("items") == 0


def test_the_slot_cap_makes_a_zero_target_unreachable() -> None:
    events = [(0, ALLOC, i, 256, 0) for i in range(4097)]
    search = smallest_budget(events, workers=1, data_start=REL.header_bytes(1), recycle_ns=TICK, rules=RULES)
    assert search.smallest_mb is None
    assert search.trials[-1].fallback_items == 1


def test_scan_and_bisect_agree_on_a_synthetic_workload() -> None:
    w = SyntheticWorkload(items=(3 * MiB + 5, 700_000), requests=200, rate=50.0, duration_ns=TICK * 3, mode="deferred", seed=3)
    events = synthesize(w, workers=2)
    kwargs = {"workers": 2, "data_start": REL.header_bytes(2), "recycle_ns": TICK, "rules": RULES}
    bisect = smallest_budget(events, **kwargs)
    scan = smallest_budget(events, method="scan", **kwargs)
    assert bisect.smallest_mb is not None
    assert scan.smallest_mb <= bisect.smallest_mb
    assert trial(events, scan.smallest_mb, **kwargs).fallback_items == 0
    assert trial(events, bisect.smallest_mb - 1, **kwargs).fallback_items > 0


def test_fallback_can_rise_with_the_budget_and_scan_finds_the_smaller_answer() -> None:
    # found by a random search: 14 and 15 MiB lose nothing, 16 MiB loses one feature (its larger
    # pool splits a range differently), 17 MiB and up lose nothing again
    mib = 1 << 20
    events = [
        (1, ALLOC, 0, mib, 0),
        (2, ALLOC, 1, 4 * mib, 0),
        (TICK + 2, FREE, 1, 0, 0),
        (TICK + 3, ALLOC, 3, 6 * mib, 0),
        (2 * TICK + 3, FREE, 3, 0, 0),
        (2 * TICK + 3, FREE, 0, 0, 0),
        (2 * TICK + 4, ALLOC, 6, 2 * mib, 0),
        (3 * TICK + 4, FREE, 6, 0, 0),
        (3 * TICK + 4, ALLOC, 8, 4 * mib, 0),
        (3 * TICK + 4, ALLOC, 9, 3 * mib, 0),
        (3 * TICK + 4, ALLOC, 10, 3 * mib, 0),
        (4 * TICK + 4, ALLOC, 11, 4 * mib - 32768, 0),
    ]
    kwargs = {"workers": 1, "data_start": REL.header_bytes(1), "recycle_ns": TICK, "rules": RULES}
    assert [trial(events, mb, **kwargs).fallback_items for mb in range(13, 19)] == [2, 0, 0, 1, 0, 0]
    assert smallest_budget(events, **kwargs).smallest_mb == 17  # bisection: 16 misses, 17 meets
    assert smallest_budget(events, method="scan", **kwargs).smallest_mb == 14
