"""SGLang's tune: one split's row (``tune_at``) is the row ``tune`` scores; the radix cache off; the grid's bounds."""

from __future__ import annotations

import dataclasses

import pytest

from mmpool_cli.cli.cache_options import LogFormat
from mmpool_cli.cli.tune import tune_query
from mmpool_cli.engines import engine
from mmpool_cli.engines.sglang.tune import EMBEDDING, KV, POOL, settings_of
from mmpool_cli.errors import MmpoolError
from mmpool_cli.inputs.traffic.cache_request import PrefixOptions
from mmpool_cli.inputs.traffic.tune_request import TuneRequest
from mmpool_cli.tune.split import MAX_CANDIDATES
from mmpool_cli.usecases.tune import request_of

MODEL = "examples/qwen2.5-vl-7b"
CHATS = "examples/traffic/chats.jsonl"
MiB = 1 << 20


def _request(
    kv: int | None = 2048, budget: str | None = None, disabled: bool = False, page: int = 1, points: int = 8
) -> TuneRequest:
    q = tune_query(
        MODEL,
        [CHATS],
        budget,
        "no-fallback",
        points,
        None,
        1,
        1,
        LogFormat.auto,
        None,
        None,
        None,
        PrefixOptions(kv, disabled, page),
    )
    return request_of(q)


@pytest.fixture(scope="module")
def chats() -> tuple[TuneRequest, object]:
    req = _request()
    return req, engine("sglang").tune(req)


def test_tune_at_is_the_row_tune_scores(chats) -> None:
    req, report = chats
    sglang = engine("sglang")
    today = sglang.tune_at(req)
    assert today == report.today and today.today
    for row in report.rows[:: max(1, len(report.rows) // 6)]:
        got = sglang.tune_at(req, dict(row.values))
        # the marks are the report's (the front and the recommendation need every row)
        assert dataclasses.replace(got, today=row.today, on_front=row.on_front, recommended=row.recommended) == row


def test_every_row_fits_the_budget_in_whole_units(chats) -> None:
    _req, report = chats
    assert report.budget_bytes == 2048 * 57_344 + (1024 + 100) * MiB
    assert len(report.rows) <= MAX_CANDIDATES
    for row in report.rows:
        assert row.bytes == {
            KV: row.values[KV] * 57_344,
            POOL: row.values[POOL] * MiB,
            EMBEDDING: row.values[EMBEDDING] * MiB,
        }
        assert sum(row.bytes.values()) <= report.budget_bytes
        assert report.budget_bytes - sum(row.bytes.values()) < 57_344 or row.today  # the KV takes the rest
        assert row.settings == settings_of(row.values)
    assert sum(r.recommended for r in report.rows) == 1 and sum(r.today for r in report.rows) == 1


def test_the_radix_cache_off_serves_nothing_and_every_item_is_looked_up() -> None:
    report = engine("sglang").tune(_request(disabled=True))
    assert {r.measures.prefix_served_tokens for r in report.rows} == {0}
    assert {r.figures["served_by_prefix"] for r in report.rows} == {0}
    assert {r.figures["embedding_lookups"] for r in report.rows} == {20 + 9}  # the 9 the radix cache would serve
    # nothing for the KV cache to buy but batch: the embedding cache is what saves work
    assert report.recommended.values[EMBEDDING] > 0


def test_pages_round_the_kv_down_as_sglang_does() -> None:
    report = engine("sglang").tune(_request(kv=2048, page=16))
    assert all(r.values[KV] % 16 == 0 for r in report.rows)


def test_a_budget_with_no_room_beside_the_pool_is_an_error() -> None:
    with pytest.raises(MmpoolError, match="leaves no KV token beside the smallest pool"):
        engine("sglang").tune(_request(kv=None, budget="8MiB"))


def test_without_max_total_tokens_today_has_what_the_budget_leaves() -> None:
    report = engine("sglang").tune(_request(kv=None, budget="1300MiB"))
    today = report.today
    assert today is not None
    assert today.values == {KV: (1300 - 1024 - 100) * MiB // 57_344, POOL: 1024, EMBEDDING: 100}
    assert report.budget_origin == "--budget 1300MiB"


def test_an_unknown_objective_is_refused() -> None:
    with pytest.raises(MmpoolError, match="--objective cheapest: one of no-fallback, least-work, most-kv"):
        engine("sglang").tune(dataclasses.replace(_request(), objective="cheapest"))


def test_tune_at_refuses_a_split_sglang_cannot_take() -> None:
    req = _request(page=16)
    sglang = engine("sglang")
    with pytest.raises(MmpoolError, match="a split names every memory: embedding missing"):
        sglang.tune_at(req, {KV: 2048, POOL: 20})
    with pytest.raises(MmpoolError, match="whole pages of 16 tokens"):
        sglang.tune_at(req, {KV: 2047, POOL: 20, EMBEDDING: 0})
    with pytest.raises(MmpoolError, match="SGLANG_MM_FEATURE_CACHE_MB=0: a budget SGLang refuses"):
        sglang.tune_at(req, {KV: 2048, POOL: 0, EMBEDDING: 0})


def test_today_with_no_kv_left_is_not_scored_and_says_so() -> None:
    report = engine("sglang").tune(_request(kv=None, budget="150MiB"))
    assert report.today is None and report.status == "ok"
    (note,) = [n for n in report.notes if n.code == "tune-today-not-scored"]
    assert "SGLANG_MM_FEATURE_CACHE_MB=1024 and SGLANG_VLM_CACHE_SIZE_MB=100 leave no KV token" in note.message


def test_a_feature_no_pool_holds_still_gives_a_pool_curve() -> None:
    from mmpool_cli.engines.sglang.tune_scores import Scorer

    req = _request()
    setup = engine("sglang").simulation_setup(req.pools, req.environ)
    small = dataclasses.replace(setup, highest_mb=6)  # the chats' largest feature needs 8 MiB
    points = Scorer(req, small).pool_curve()
    assert [p.budget_mb for p in points] == list(range(small.lowest_mb, 7))
    assert all(p.fallback_items > 0 for p in points)


def test_the_points_made_in_forked_workers_are_the_points_made_here(monkeypatch, chats) -> None:
    from mmpool_cli.engines.sglang import tune_scores

    req, report = chats
    monkeypatch.setattr(tune_scores, "PARALLEL_FROM", 0)  # every KV point in a worker
    monkeypatch.setattr("mmpool_cli.core.workers.default_jobs", lambda: 2)
    assert engine("sglang").tune(req) == report


def test_the_pool_replayed_in_a_forked_process_ahead_is_the_pool_replayed_here(monkeypatch, chats) -> None:
    from mmpool_cli.engines.sglang import tune_scores

    req, report = chats
    made = []
    real = tune_scores._PoolAhead.result
    monkeypatch.setattr(tune_scores._PoolAhead, "result", lambda self: made.append(real(self)) or made[-1])
    monkeypatch.setattr(tune_scores, "AHEAD_FROM", 0)  # the pool's curve in a forked process
    monkeypatch.setattr("mmpool_cli.core.workers.default_jobs", lambda: 2)
    assert engine("sglang").tune(req) == report
    assert made and made[0] is not None  # made there, not here


def test_a_pool_that_fails_ahead_is_made_here_and_fails_in_its_own_words(monkeypatch, chats) -> None:
    import os

    from mmpool_cli.engines.sglang import tune_scores

    req, report = chats
    here, real = os.getpid(), tune_scores.Scorer._pool_curve

    def fails_there(self):  # whatever goes wrong in the forked process; here the curve is made
        if os.getpid() != here:
            raise RuntimeError("lost")
        return real(self)

    monkeypatch.setattr(tune_scores.Scorer, "_pool_curve", fails_there)
    monkeypatch.setattr(tune_scores, "AHEAD_FROM", 0)
    monkeypatch.setattr("mmpool_cli.core.workers.default_jobs", lambda: 2)
    assert engine("sglang").tune(req) == report


@pytest.mark.parametrize("page", [1, 16])
def test_the_lookups_behind_the_radix_cache_equal_those_made_item_by_item(page: int) -> None:
    from mmpool_cli.engines.sglang import cache_lookups, prefix
    from mmpool_cli.engines.sglang.tune_scores import Scorer

    req = _request(page=page)
    scorer = Scorer(req, engine("sglang")._tune_setup(req))
    built, behind = scorer.built, scorer.behind
    assert built is not None and behind is not None  # the chats' items lie in their prompts in order
    capacities = sorted({page, *range(page, scorer.saturated + 2 * page, max(page, scorer.saturated // 40))})
    seen = set()
    for capacity in capacities:
        served = prefix.served_at(built, capacity // page * page or page, page)
        covered = prefix.covered_by(built, served)
        k = behind.covers(served)
        assert sum(k) == len(covered)
        want = cache_lookups.embedding_lookups(req.cache, scorer.tokens, scorer.width, covered, scorer.batches)
        assert behind.at(k, scorer.width) == want
        assert behind.spared(k) == prefix.spared(scorer.groups, covered)
        seen.add(len(covered))
    assert len(seen) > 3  # capacities that cover few items, many, and every one


def test_the_batches_behind_the_radix_cache_are_those_its_groups_make() -> None:
    from mmpool_cli.caches.replay import Lookups
    from mmpool_cli.engines.sglang import prefix
    from mmpool_cli.engines.sglang.tune_scores import Scorer

    req = _request()
    scorer = Scorer(req, engine("sglang")._tune_setup(req))
    assert scorer.behind is not None and scorer.built is not None
    for capacity in (scorer.page, scorer.saturated // 3, scorer.saturated):
        looks = scorer.behind.at(scorer.behind.covers(prefix.served_at(scorer.built, capacity, scorer.page)), 1)
        lk = looks.neutral()
        assert lk.batches == Lookups(lk.keys, lk.sizes, lk.weights, lk.work, lk.groups).batches
