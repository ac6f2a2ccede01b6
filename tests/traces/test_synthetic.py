"""The synthetic workload: arrivals, round-robin dispatch, lease lifetimes by mode, seeds."""

from __future__ import annotations

import pytest

from mmpool_cli.errors import MmpoolError
from mmpool_cli.pools.replay import ALLOC, FREE
from mmpool_cli.traces.synthetic import SyntheticWorkload as Workload
from mmpool_cli.traces.synthetic import synthesize

MS = 1_000_000


def test_fixed_concurrency_sends_the_next_request_when_one_ends() -> None:
    w = Workload(items=(100, 200), requests=4, concurrency=2, duration_ns=300 * MS, mode="deferred", burst=True)
    allocs = [e for e in synthesize(w, workers=3) if e[1] == ALLOC]
    assert [(t, key, n, worker) for t, _, key, n, worker in allocs] == [
        (0, 0, 100, 0),
        (0, 1, 200, 0),
        (0, 2, 100, 1),
        (0, 3, 200, 1),
        (300 * MS, 4, 100, 2),
        (300 * MS, 5, 200, 2),
        (300 * MS, 6, 100, 0),
        (300 * MS, 7, 200, 0),
    ]


def test_clients_start_spread_over_one_request_time_unless_burst() -> None:
    # with fixed request times, clients that all start at 0 stay in lockstep for ever
    w = Workload(items=(100,), requests=8, concurrency=4, duration_ns=400 * MS)
    starts = [e[0] for e in synthesize(w, workers=1) if e[1] == ALLOC]
    assert starts == [0, 100 * MS, 200 * MS, 300 * MS, 400 * MS, 500 * MS, 600 * MS, 700 * MS]
    burst = Workload(items=(100,), requests=8, concurrency=4, duration_ns=400 * MS, burst=True)
    assert [e[0] for e in synthesize(burst, workers=1) if e[1] == ALLOC] == [0] * 4 + [400 * MS] * 4


def test_eager_leases_are_acknowledged_on_receipt_deferred_ones_at_prefill() -> None:
    base = {"items": (100,), "requests": 1, "concurrency": 1, "duration_ns": 900 * MS}
    eager = synthesize(Workload(**base, mode="eager", ack_delay_ns=20 * MS), workers=1)
    deferred = synthesize(Workload(**base, mode="deferred"), workers=1)
    prefill = synthesize(Workload(**base, mode="deferred", hold_ns=150 * MS), workers=1)
    assert list(eager) == [(0, ALLOC, 0, 100, 0), (20 * MS, FREE, 0, 0, 0)]
    assert list(deferred) == [(0, ALLOC, 0, 100, 0), (900 * MS, FREE, 0, 0, 0)]
    assert list(prefill) == [(0, ALLOC, 0, 100, 0), (150 * MS, FREE, 0, 0, 0)]


def test_poisson_arrivals_are_seeded_and_in_time_order() -> None:
    w = Workload(items=(1,), requests=500, rate=40.0, residency="exponential", seed=7)
    events = list(synthesize(w, workers=2))
    assert events == list(synthesize(w, workers=2))
    assert events != list(synthesize(Workload(**{**w.__dict__, "seed": 8}), workers=2))
    times = [e[0] for e in events]
    assert times == sorted(times)
    arrivals = [e[0] for e in events if e[1] == ALLOC]
    assert 8e9 < arrivals[-1] < 17e9  # 499 gaps of mean 25 ms: about 12.5 s


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"items": ()}, "nothing to simulate: give the features of one request"),
        ({"items": (0,)}, "at least 1 byte"),
        ({"concurrency": 2}, "exactly one of --rate"),
        ({"rate": None}, "exactly one of --rate"),
        ({"rate": 0.0}, "--rate"),
        ({"requests": 0}, "--requests"),
        ({"requests": 10**7}, "more than"),
        ({"ack_delay_ns": -1}, "must not be negative"),
    ],
)
def test_bad_workloads_are_usage_errors(change: dict, message: str) -> None:
    w = Workload(**{"items": (1,), "requests": 1, "rate": 1.0, **change})
    with pytest.raises(MmpoolError, match=message):
        synthesize(w, workers=1)


def test_more_clients_than_requests_costs_nothing_extra() -> None:
    w = Workload(items=(1,), requests=3, concurrency=10**9, burst=True)
    assert [e[0] for e in synthesize(w, workers=1) if e[1] == ALLOC] == [0, 0, 0]


def test_a_requests_features_form_one_group_for_cuda_vmm() -> None:
    w = Workload(
        items=(100, 200, 300), requests=2, concurrency=2, packable=(True, True, False), element_sizes=(4, 2, 1)
    )
    events = synthesize(w, workers=1)
    allocs = [i for i, op in enumerate(events.op) if op == ALLOC]
    assert [events.group[i] for i in allocs] == [0, 0, 0, 1, 1, 1]
    assert [events.pack[i] for i in allocs] == [1, 1, 0] * 2
    assert [events.elem[i] for i in allocs] == [4, 2, 1] * 2
    deferred = synthesize(Workload(**{**w.__dict__, "mode": "deferred"}), workers=1)
    assert not any(deferred.pack)  # a deferred feature is never packed
