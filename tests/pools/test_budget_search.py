"""The budget search: the safe budget, the scan and the bisection's estimate, whole MiB."""

from __future__ import annotations

from fractions import Fraction

from mmpool_cli.core.units import MiB
from mmpool_cli.engines.sglang import versions
from mmpool_cli.engines.sglang.simulation import pool_rules
from mmpool_cli.pools import budget_search as budget
from mmpool_cli.pools.budget_search import layout_for
from mmpool_cli.pools.replay import ALLOC, FREE
from mmpool_cli.traces.synthetic import SyntheticWorkload as Workload
from mmpool_cli.traces.synthetic import synthesize

REL = versions.release(versions.NEWEST)
RULES = pool_rules(REL)
ipc_header_bytes = REL.header_bytes

TICK = 50_000_000
HIGHEST = 4096


def layouts(workers: int, data_start: int, recycle_ns: int):
    return lambda mb: layout_for(mb, workers, data_start, recycle_ns, RULES)


def smallest_budget(events, *, workers, data_start, recycle_ns, jobs=1, **options):
    lowest = -(-((data_start + 1) * workers) // MiB)
    return budget.smallest_budget(
        events,
        layouts=layouts(workers, data_start, recycle_ns),
        lowest=lowest,
        highest=HIGHEST,
        jobs=jobs,
        **options,
    )


def trial(events, mb, *, workers, data_start, recycle_ns):
    return budget.trial(events, mb, layouts(workers, data_start, recycle_ns))


def test_the_smallest_budget_for_ten_six_mib_features_in_flight() -> None:
    # ten 6 MiB features in flight at once on one worker at TP=1: 60 MiB + the 32 KiB header
    events = [(0, ALLOC, i, 6 * MiB, 0) for i in range(10)] + [(1, FREE, i, 0, 0) for i in range(10)]
    search = smallest_budget(events, workers=1, data_start=ipc_header_bytes(1), recycle_ns=TICK)
    assert search.smallest_mb == 61
    deciding = {
        mb: next(t for t in reversed(search.trials) if t.mb <= mb <= max(t.mb, t.same_until_mb)) for mb in (60, 61)
    }
    assert deciding[61].fallback_items == 0
    assert deciding[60].fallback_items == 1


def test_two_workers_split_the_budget() -> None:
    events = [(0, ALLOC, i, 6 * MiB, i % 2) for i in range(10)]
    search = smallest_budget(events, workers=2, data_start=ipc_header_bytes(1), recycle_ns=TICK)
    assert search.smallest_mb == 61  # 30.5 MiB each: 5 x 6 MiB + the header


def test_a_target_rate_allows_some_fallback() -> None:
    events = [(0, ALLOC, i, 6 * MiB, 0) for i in range(10)]
    search = smallest_budget(events, workers=1, data_start=ipc_header_bytes(1), recycle_ns=TICK, target=Fraction(1, 5))
    assert search.smallest_mb == 49  # 8 of 10 fit
    assert search.trials[-1].rate("items") == 0


def test_the_slot_cap_makes_a_zero_target_unreachable() -> None:
    events = [(0, ALLOC, i, 256, 0) for i in range(4097)]
    search = smallest_budget(events, workers=1, data_start=ipc_header_bytes(1), recycle_ns=TICK)
    assert search.smallest_mb is None
    assert search.trials[-1].fallback_items == 1


def test_scan_and_bisect_agree_on_a_synthetic_workload() -> None:
    w = Workload(items=(3 * MiB + 5, 700_000), requests=200, rate=50.0, duration_ns=TICK * 3, mode="deferred", seed=3)
    events = synthesize(w, workers=2)
    kwargs = {"workers": 2, "data_start": ipc_header_bytes(2), "recycle_ns": TICK}
    bisect = smallest_budget(events, method="bisect", **kwargs)
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
    kwargs = {"workers": 1, "data_start": ipc_header_bytes(1), "recycle_ns": TICK}
    assert [trial(events, mb, **kwargs).fallback_items for mb in range(13, 19)] == [2, 0, 0, 1, 0, 0]
    assert smallest_budget(events, method="bisect", **kwargs).smallest_mb == 17  # 16 misses, 17 meets
    assert smallest_budget(events, method="scan", **kwargs).smallest_mb == 14
    safe = smallest_budget(events, **kwargs)
    # 14 meets the target but 16, within twice it, does not: 17 is the safe answer, 14 fragile
    assert (safe.smallest_mb, safe.fragile_mb) == (17, 14)
    assert safe.upper_mb == min(34, safe.no_miss_mb)
    assert smallest_budget(events, jobs=2, **kwargs).smallest_mb == 17


def test_the_safe_budget_is_capped_by_the_highest_budget_allowed() -> None:
    events = [(0, ALLOC, i, 6 * MiB, 0) for i in range(10)]
    search = budget.smallest_budget(events, layouts=layouts(1, ipc_header_bytes(1), TICK), lowest=1, highest=40, jobs=1)
    assert search.smallest_mb is None  # 61 MiB would be needed; plan's top is 40
    assert search.top_mb == 40
    assert max(t.mb for t in search.trials) <= 40


def test_a_search_stopped_by_its_limit_says_it_is_not_exact() -> None:
    w = Workload(items=(3 * MiB + 5, 700_000), requests=200, rate=50.0, duration_ns=TICK * 3, mode="deferred", seed=3)
    events = synthesize(w, workers=2)
    kwargs = {"workers": 2, "data_start": ipc_header_bytes(2), "recycle_ns": TICK}
    full = smallest_budget(events, **kwargs)
    assert full.exact and full.checked_mb is None
    n = len(events)
    stopped = smallest_budget(events, max_events=n, **kwargs)  # one whole replay past the estimate
    assert not stopped.exact
    lo, hi = stopped.checked_mb
    assert lo <= stopped.smallest_mb <= hi
    assert all(trial(events, mb, **kwargs).fallback_items == 0 for mb in range(lo, hi + 1))
    # the limit is kept to within one trial, and what is left is counted
    assert full.spent_events > stopped.spent_events
    count, first, last = stopped.undecided
    assert first == 1 and count > 0 and stopped.more_events == count * n


def test_the_trials_do_not_depend_on_the_cores_or_the_limit_s_sharing() -> None:
    w = Workload(items=(3 * MiB + 5, 700_000), requests=200, rate=50.0, duration_ns=TICK * 3, mode="deferred", seed=3)
    events = synthesize(w, workers=2)
    kwargs = {"workers": 2, "data_start": ipc_header_bytes(2), "recycle_ns": TICK}
    one, two = smallest_budget(events, jobs=1, **kwargs), smallest_budget(events, jobs=2, **kwargs)
    assert one.trials == two.trials and one.spent_events == two.spent_events
    assert one.spent_events == sum(t.events for t in one.trials)
    for limit in (1, 3 * len(events), 10 * len(events)):
        a = smallest_budget(events, jobs=1, max_events=limit, **kwargs)
        b = smallest_budget(events, jobs=2, max_events=limit, **kwargs)
        assert (a.trials, a.smallest_mb, a.exact, a.undecided) == (b.trials, b.smallest_mb, b.exact, b.undecided)
