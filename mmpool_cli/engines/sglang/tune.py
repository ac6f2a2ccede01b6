"""SGLang 0.5.23's GPU memory divided between the KV cache, the embedding cache and the feature pool.

Three memories per rank, each a setting SGLang takes:

* the **KV cache** (``--max-total-tokens``), which is also the radix (prefix) cache: bytes become
  tokens as SGLang turns them, ``(bytes // cell) // page * page`` (``workload.kv``);
* the **embedding cache** (``SGLANG_VLM_CACHE_SIZE_MB``, whole MiB);
* the **feature pool** (``SGLANG_MM_FEATURE_CACHE_MB``, whole MiB, split over the tokenizer workers).

SGLang takes the last two out of the KV memory on every rank (``kv_cache_configurator.py``), so
every MiB given to one is taken from the KV cache. Each candidate is scored from one replay per
memory and point, by the functions ``mmpool cache`` and ``mmpool simulate`` run (``tune_scores``),
so every row equals what ``cache`` and ``simulate`` print at its settings. The candidates: the
pool's budgets where its curve changes, each with embedding caches from 0 to the size that never
evicts, pool + cache on one lattice of totals (few distinct KV sizes, each a radix replay), and
today's launch.

Pure core: standard library only.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from mmpool_cli.caches.replay import never_evicts
from mmpool_cli.core.units import MiB
from mmpool_cli.engines.sglang import cache_lookups, caches, prefix, versions
from mmpool_cli.engines.sglang.tune_scores import EMBEDDING, KV, POOL, Scorer, settings_of
from mmpool_cli.errors import MmpoolError
from mmpool_cli.inputs.traffic.tune_request import TuneRequest
from mmpool_cli.pools.curve import CurvePoint
from mmpool_cli.pools.report import PoolSetup
from mmpool_cli.tune.front import OBJECTIVES, mark
from mmpool_cli.tune.split import Memory, Row, TuneNote, TuneReport, fitting, lattice_pairs

__all__ = ["EMBEDDING", "KV", "MEMORIES", "POOL", "settings_of", "tune", "tune_at"]

UNKNOWN_BUDGET = (
    "mmpool tune: the memory to divide is unknown: give --budget SIZE (the GPU memory per rank the KV cache, the "
    "embedding cache and the pool share), or --max-total-tokens N (today's KV capacity, which SGLang prints at "
    "start-up as max_total_num_tokens) to divide today's launch's"
)
MEMORIES = (
    Memory(KV, "--max-total-tokens", "tokens"),
    Memory(POOL, "SGLANG_MM_FEATURE_CACHE_MB", "MiB"),
    Memory(EMBEDDING, "SGLANG_VLM_CACHE_SIZE_MB", "MiB"),
)


@dataclass(frozen=True)
class _Today:
    values: dict[str, int] | None  # None: no KV token is left beside today's pool and embedding cache
    pool_mb: int
    embedding_mb: int


def _today(request: TuneRequest, setup: PoolSetup, total: int, cell: int, page: int) -> _Today:
    """Today's launch: its pool and embedding cache, and its KV (``--max-total-tokens``, else the budget's rest)."""
    emb_mb = caches.embedding_size(request.cache)[0] // MiB
    kv = request.cache.prefix.capacity_tokens
    if kv is None:
        kv = (total - (setup.budget_mb + emb_mb) * MiB) // cell // page * page
    values = {KV: kv, POOL: setup.budget_mb, EMBEDDING: emb_mb} if kv >= page else None
    return _Today(values, setup.budget_mb, emb_mb)


def budget(request: TuneRequest, setup: PoolSetup) -> tuple[int, str]:
    """The bytes per rank to divide, and where they come from: ``--budget``, else today's launch."""
    if request.budget_bytes is not None:
        return request.budget_bytes, f"--budget {request.budget_text or request.budget_bytes}"
    req = request.cache
    kv = req.prefix.capacity_tokens
    cell = req.shape.kv_cell_bytes
    if kv is None:
        raise MmpoolError(UNKNOWN_BUDGET)
    assert cell
    pool_mb, emb_mb = setup.budget_mb, caches.embedding_size(req)[0] // MiB
    total = kv * cell + (pool_mb + emb_mb) * MiB
    return total, (
        f"today's launch: --max-total-tokens {kv} × {cell:,} B a token + SGLANG_MM_FEATURE_CACHE_MB={pool_mb} "
        f"+ SGLANG_VLM_CACHE_SIZE_MB={emb_mb}"
    )


def _pool_choices(points: Sequence[CurvePoint], n: int) -> list[int]:
    """The pool's budgets worth a row: each curve point that no smaller budget matches on fallback (items and
    bytes), thinned evenly to ``n`` (the first and the last kept)."""
    kept: list[CurvePoint] = []
    for p in sorted(points, key=lambda p: p.budget_mb):
        if not any(q.fallback_items <= p.fallback_items and q.fallback_bytes <= p.fallback_bytes for q in kept):
            kept.append(p)
    if len(kept) > n >= 2:
        kept = [kept[i * (len(kept) - 1) // (n - 1)] for i in range(n)]
    return [p.budget_mb for p in kept]


def _scored(request: TuneRequest, setup: PoolSetup) -> tuple[Scorer, int, str, list[dict[str, int]], _Today]:
    if request.objective not in OBJECTIVES:
        raise MmpoolError(f"--objective {request.objective}: one of {', '.join(OBJECTIVES)}")
    scorer = Scorer(request, setup, ahead=[setup.budget_mb])  # today's pool beside its curve
    total, origin = budget(request, setup)
    today = _today(request, setup, total, scorer.cell, scorer.page)
    curve = scorer.pool_curve()
    pools = _pool_choices(curve, request.points)
    # the size from which the embedding cache never evicts, with every item looked up (no KV point looks up more)
    # (behind the radix cache, made here before the KV points fork: their batches with nothing covered, made once)
    every = (
        scorer.behind.lookups([0] * len(scorer.built.requests), scorer.width)[0]
        if scorer.behind is not None and scorer.built is not None
        else cache_lookups.embedding_lookups(request.cache, scorer.tokens, scorer.width, set(), scorer.batches)
    )
    widest = -(-never_evicts(every.neutral()) // MiB) if scorer.groups else 0
    # each pool budget with embedding caches from 0 to past that size, pool + cache on one lattice of totals:
    # the KV cache, which takes the rest, then has few distinct sizes, each a radix replay
    combos = [{POOL: p, EMBEDDING: e} for p, e in lattice_pairs(sorted(set(pools)), widest, request.points)]
    if setup.lowest_mb <= today.pool_mb <= setup.highest_mb:  # today's pool and cache, the KV the rest
        combos.append({POOL: today.pool_mb, EMBEDDING: today.embedding_mb})
    candidates = []
    for combo, left in fitting(total, combos, lambda _name, mb: mb * MiB):
        kv = scorer.kv_tokens(left)
        if kv >= scorer.page:
            candidates.append({KV: kv, **combo})
    return scorer, total, origin, candidates, today


def tune(request: TuneRequest, setup: PoolSetup) -> TuneReport:
    """Every candidate split of the budget scored; the front and the recommendation."""
    scorer, total, origin, candidates, today = _scored(request, setup)
    built = scorer.built
    said = [*request.cache.notes, *(prefix.not_replayed(built, len(scorer.groups)) if built is not None else [])]
    if today.values is not None and built is not None and any(c is not None for c in built.cached):
        # the server's cached_tokens against the radix replay at today's KV, as cache compares them
        off = request.cache.prefix.disabled
        at = (
            [0] * len(built.requests)
            if off
            else prefix.served_at(built, scorer.kv_point(today.values[KV]), scorer.page)
        )
        said.extend(prefix._check(built, at))
    notes = list(said)
    splits_ = [s for s in candidates if s != today.values]
    over = False
    if today.values is None:
        notes.append(
            TuneNote(
                "tune-today-not-scored",
                "warning",
                f"today's SGLANG_MM_FEATURE_CACHE_MB={today.pool_mb} and SGLANG_VLM_CACHE_SIZE_MB={today.embedding_mb} "
                f"leave no KV token of the {total:,} B per rank divided: today's launch is not scored",
            )
        )
    else:
        used = today.values[KV] * scorer.cell + (today.pool_mb + today.embedding_mb) * MiB
        if not setup.lowest_mb <= today.pool_mb <= setup.highest_mb:
            notes.append(
                TuneNote(
                    "tune-today-not-scored",
                    "warning",
                    f"today's SGLANG_MM_FEATURE_CACHE_MB={today.pool_mb} is outside the budgets SGLang accepts for "
                    f"this layout ({setup.lowest_mb} to {setup.highest_mb} MiB): today's launch is not scored",
                )
            )
        else:
            over = used > total
            if over:
                notes.append(
                    TuneNote(
                        "tune-today-over-budget",
                        "warning",
                        f"today's launch takes {used:,} B per rank, more than the {total:,} B divided: its row is "
                        "shown to compare, never recommended",
                    )
                )
            splits_.append(today.values)
    if not splits_ or (over and len(splits_) == 1):
        raise MmpoolError(
            f"mmpool tune: {total:,} B per rank leaves no KV token beside the smallest pool and embedding cache; "
            "give a larger --budget"
        )
    rows = scorer.rows(splits_, today.values)
    marked, status = mark(rows, request.objective, [not (over and r.today) for r in rows])
    return TuneReport(
        engine=f"SGLang {versions.NEWEST}",
        version=versions.NEWEST,
        source=request.source or request.cache.source,
        budget_bytes=total,
        budget_origin=origin,
        memories=MEMORIES,
        rows=marked,
        objective=request.objective,
        assumptions=scorer.assumptions(),
        notes=tuple(notes),
        status=status,
    )


def tune_at(request: TuneRequest, setup: PoolSetup, values: dict[str, int] | None = None) -> Row:
    """One split's row (None: today's launch), from the same replays as ``tune``'s rows."""
    scorer = Scorer(request, setup)
    today = values is None
    if values is None:
        total, _ = budget(request, setup)
        launch = _today(request, setup, total, scorer.cell, scorer.page)
        if launch.values is None:
            raise MmpoolError(f"today's launch leaves no KV token of the {total:,} B per rank divided")
        values = launch.values
    missing = [m.name for m in MEMORIES if m.name not in values]
    if missing:
        raise MmpoolError(f"a split names every memory: {', '.join(missing)} missing")
    if not setup.lowest_mb <= values[POOL] <= setup.highest_mb:
        raise MmpoolError(
            f"SGLANG_MM_FEATURE_CACHE_MB={values[POOL]}: a budget SGLang refuses for this layout ({setup.lowest_mb} to "
            f"{setup.highest_mb} MiB; 'mmpool plan --size {values[POOL]}MiB' says why)"
        )
    if values[KV] < scorer.page or values[KV] % scorer.page or min(values[POOL], values[EMBEDDING]) < 0:
        raise MmpoolError(f"{values}: the KV cache takes whole pages of {scorer.page} tokens, each size at least 0")
    return scorer.rows([values], values if today else None)[0]
