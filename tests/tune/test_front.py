"""The Pareto front and the objectives of ``mmpool tune``: checked against a brute force over random rows."""

from __future__ import annotations

import random
from fractions import Fraction

import pytest

from mmpool_cli.tune.front import OBJECTIVES, dominates, front, key, mark, recommend
from mmpool_cli.tune.split import Measures, Row


def _row(fallback: int, work: int, kv: int, fallback_bytes: int = 0) -> Row:
    m = Measures(
        requests=4,
        prompt_tokens=work + 10,
        prefix_served_tokens=10,
        encoder_tokens=0,
        fallback_items=fallback,
        fallback_bytes=fallback_bytes,
        kv_tokens=kv,
        batch=kv // 100,
    )
    return Row({"kv": kv}, {"kv": kv}, m, ())


def test_measures_derive_work() -> None:
    m = _row(0, 30, 500).measures
    assert (m.prefill_tokens, m.work, m.work_per_request) == (30, 30, Fraction(15, 2))


def test_front_by_hand() -> None:
    rows = [_row(0, 100, 1000), _row(0, 80, 900), _row(1, 50, 1000), _row(0, 100, 900), _row(0, 80, 900)]
    assert front(rows) == [True, True, True, False, True]  # equal rows are both on it
    assert recommend(rows) == 1
    assert recommend(rows, "least-work") == 2
    assert recommend(rows, "most-kv") == 0


@pytest.mark.parametrize("seed", range(20))
def test_front_and_recommendation_against_brute_force(seed: int) -> None:
    rng = random.Random(seed)
    rows = [_row(rng.randint(0, 3), rng.randint(0, 9), rng.randint(0, 9), rng.randint(0, 2)) for _ in range(40)]
    on = front(rows)
    for i, r in enumerate(rows):
        beaten = any(dominates(o.measures, r.measures) for j, o in enumerate(rows) if j != i)
        assert on[i] is not beaten
    for objective in OBJECTIVES:
        best = recommend(rows, objective)
        assert on[best]
        assert all(key(rows[best].measures, objective) <= key(r.measures, objective) for r in rows)


def test_unknown_objective() -> None:
    with pytest.raises(ValueError, match="one of no-fallback"):
        key(_row(0, 1, 1).measures, "cheapest")


def test_mark_and_status() -> None:
    rows = [_row(0, 100, 1000), _row(0, 80, 900)]
    today = [Row(r.values, r.bytes, r.measures, r.settings, today=i == 0) for i, r in enumerate(rows)]
    marked, status = mark(today)
    assert [(r.on_front, r.recommended) for r in marked] == [(True, False), (True, True)]
    assert status == "fail"  # today's launch does more work than the recommended split
    assert mark(rows)[1] == "ok"  # no today's row: nothing to hold to it
    assert mark([today[1]])[1] == "ok"
