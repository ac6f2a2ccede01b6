"""SGLang 0.5.23's GPU memory divided between the KV cache, the embedding cache and the feature pool.

Three memories per rank, each a setting SGLang takes:

* the **KV cache** (``--max-total-tokens``), which is also the radix (prefix) cache: bytes become
  tokens as SGLang turns them, ``(bytes // cell) // page * page`` (``workload.kv``);
* the **embedding cache** (``SGLANG_VLM_CACHE_SIZE_MB``, whole MiB);
* the **feature pool** (``SGLANG_MM_FEATURE_CACHE_MB``, whole MiB, split over the tokenizer workers).

SGLang takes the last two out of the KV memory on every rank (``kv_cache_configurator.py``), so
every MiB given to one is taken from the KV cache. Each candidate is scored from one replay per
memory, by the functions ``mmpool cache`` and ``mmpool simulate`` run: the pool's replay at each of
its budgets (``simulate --curve``'s points), the radix cache replayed at each distinct KV point,
and the embedding cache behind it at that point (its lookups are the items the radix cache did not
serve), read at each candidate's size from its one-pass curve (a replay at each size where one pass
is not exact). So every row equals what ``cache`` and ``simulate`` print at its settings.

Pure core: standard library only.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace

from mmpool_cli.caches import prefix as radix
from mmpool_cli.caches.replay import never_evicts
from mmpool_cli.core.units import MiB
from mmpool_cli.engines.sglang import caches, prefix, versions
from mmpool_cli.errors import MmpoolError
from mmpool_cli.inputs.traffic.cache_request import CacheRequest
from mmpool_cli.inputs.traffic.tune_request import TuneRequest
from mmpool_cli.pools.curve import CurvePoint
from mmpool_cli.pools.report import PoolSetup
from mmpool_cli.pools.trials import no_miss_budget
from mmpool_cli.tune.front import OBJECTIVES, mark
from mmpool_cli.tune.split import (
    Measures,
    Memory,
    Row,
    TuneNote,
    TuneReport,
    batch_of,
    mib_grid,
    splits,
)

KV, POOL, EMBEDDING = "kv", "pool", "embedding"
MEMORIES = (
    Memory(KV, "--max-total-tokens", "tokens"),
    Memory(POOL, "SGLANG_MM_FEATURE_CACHE_MB", "MiB"),
    Memory(EMBEDDING, "SGLANG_VLM_CACHE_SIZE_MB", "MiB"),
)


@dataclass
class _KvPoint:
    """What the radix cache and the embedding cache behind it do at one KV capacity."""

    served: int  # prompt tokens served
    items_served: int  # embedding lookups spared (served_by_prefix)
    looks: caches._Lookups  # the embedding cache's lookups behind it
    work: int  # their encoder tokens, every one missing
    evicts: bool  # the radix cache evicts at this capacity (its answer depends on lifetimes and outputs)
    at: dict[int, tuple[int, int, int]] = field(default_factory=dict)  # embedding bytes -> (hits, saved, lookups)


class Scorer:
    """The traffic read once; the replays of each memory made once per point and shared by every row."""

    def __init__(self, request: TuneRequest, setup: PoolSetup) -> None:
        from mmpool_cli.inputs.traffic import writer
        from mmpool_cli.traces.events import as_events

        req = request.cache
        if req.family.name not in caches.FAMILIES:
            caches.caches(req)  # its own refusal, in its own words
        cell = req.shape.kv_cell_bytes
        if not cell:
            raise MmpoolError(
                f"{req.family.name}: the KV cache's tokens per byte need the model's attention shape; give --model DIR "
                "(a model directory whose config.json has it)"
            )
        self.request, self.req, self.setup, self.cell = request, req, setup, cell
        self.page = max(1, req.prefix.page_size)
        self.width = caches._width(req)
        self.tokens = [caches._tokens(req, item) for item in req.items]
        self.groups = list(prefix.requests_of(req.items))
        self.built = prefix.build(req, self.tokens, self.groups) if req.prompts else None
        requests = self.built.requests if self.built is not None else []
        self.request_tokens = [-(-(len(r.tokens) + len(r.output)) // self.page) * self.page for r in requests]
        saturated = radix.never_evicts(requests, radix.Radix, page_size=self.page) if requests else 0
        self.saturated = max(-(-saturated // self.page) * self.page, self.page)  # whole pages, as the pool is
        self.events = as_events(writer.events(request.leases))
        self.no_miss_mb = no_miss_budget(self.events, setup.layouts, setup.lowest_mb, setup.highest_mb)
        self.kv: dict[int, _KvPoint] = {}
        self.pool: dict[int, CurvePoint] = {}

    # the pool: simulate's replay at each budget
    def pool_curve(self) -> list[CurvePoint]:
        """The pool's curve as ``simulate --curve`` makes it by default (its range from the traffic)."""
        from mmpool_cli.pools.curve_range import CurveRange, pool_curve
        from mmpool_cli.pools.executors import LocalExecutor

        curve = pool_curve(CurveRange(), self.events, self.setup, executor=LocalExecutor())
        for p in curve.points:
            self.pool[p.budget_mb] = p
        return list(curve.points)

    def pool_at(self, mbs: Iterable[int]) -> None:
        """The pool replayed at each budget of ``mbs`` not replayed yet."""
        from mmpool_cli.pools.curve import replay_budgets
        from mmpool_cli.pools.executors import LocalExecutor

        todo = sorted({mb for mb in mbs if mb not in self.pool})
        if not todo:
            return
        for p in replay_budgets(
            self.events, self.setup.layouts, todo, top=self.setup.highest_mb, executor=LocalExecutor()
        ):
            self.pool[p.budget_mb] = p

    # the KV cache: the radix replay at each capacity, and the embedding cache behind it
    def kv_at(self, capacity: int) -> _KvPoint:
        """The radix cache at ``capacity`` tokens and the embedding cache's lookups behind it. From the
        capacity that never evicts up, every capacity serves what that one serves (``caches.prefix``):
        those share one replay."""
        built, req = self.built, self.req
        off = built is None or req.prefix.disabled
        point = 0 if off else min(capacity, self.saturated)
        got = self.kv.get(point)
        if got is not None:
            return got
        if built is None or req.prefix.disabled:
            served = [0] * (len(built.requests) if built is not None else 0)
        else:
            served = prefix.served_at(built, point, self.page)
        covered = prefix.covered_by(built, served) if built is not None else set()
        looks = caches.embedding_lookups(req, self.tokens, self.width, covered)
        got = self.kv[point] = _KvPoint(
            sum(served),
            prefix.spared(self.groups, covered),
            looks,
            caches.looked_up_work(looks),
            point < self.saturated,
        )
        return got

    def embedding_at(self, point: _KvPoint, sizes: Iterable[int]) -> None:
        todo = sorted({s for s in sizes if s not in point.at})
        if todo:
            point.at.update(zip(todo, embedding_at(point.looks, todo), strict=True))

    def kv_tokens(self, nbytes: int) -> int:
        """The tokens SGLang makes of ``nbytes`` of KV memory: ``(bytes // cell) // page * page``."""
        return nbytes // self.cell // self.page * self.page

    def rows(self, splits_: Sequence[dict[str, int]], today: dict[str, int] | None = None) -> list[Row]:
        """The row of each split (memory name -> setting), the replays each needs made once."""
        self.pool_at(s[POOL] for s in splits_)
        by_kv: dict[int, set[int]] = {}
        for s in splits_:
            by_kv.setdefault(s[KV], set()).add(s[EMBEDDING] * MiB)
        for kv, sizes in by_kv.items():
            self.embedding_at(self.kv_at(kv), sizes)
        return [self.row(s, s == today) for s in splits_]

    def row(self, values: dict[str, int], today: bool = False) -> Row:
        kv, pool_mb, emb_mb = values[KV], values[POOL], values[EMBEDDING]
        point, pool = self.kv_at(kv), self.pool[pool_mb]
        self.embedding_at(point, [emb_mb * MiB])
        hits, saved, lookups = point.at[emb_mb * MiB]
        built = self.built
        m = Measures(
            requests=len(self.groups),
            prompt_tokens=built.prompt_tokens if built is not None else 0,
            prefix_served_tokens=point.served,
            encoder_tokens=point.work - saved,
            fallback_items=pool.fallback_items,
            fallback_bytes=pool.fallback_bytes,
            kv_tokens=kv,
            batch=batch_of(self.request_tokens, kv),
        )
        figures = {
            "embedding_hits": hits,
            "embedding_lookups": lookups,
            "embedding_work_saved": saved,
            "served_by_prefix": point.items_served,
            "pool_items": pool.items,
            "pool_bytes": pool.bytes,
        }
        return Row(
            values=dict(values),
            bytes={KV: kv * self.cell, POOL: pool_mb * MiB, EMBEDDING: emb_mb * MiB},
            measures=m,
            settings=settings_of(values),
            today=today,
            assumed=self._assumed(point, pool_mb),
            figures=figures,
        )

    def assumptions(self) -> tuple[str, ...]:
        """What the replays assume, each once, in the order ``Row.assumed`` indexes them."""
        built = self.built
        said = list(self.request.assumptions)
        if built is None:
            said.append(
                "the traffic carries no prompts: the radix cache is not replayed (it serves nothing, every item is "
                "looked up) and the batch is not counted"
            )
            return tuple(said)
        said.append(prefix._assumed(built, self.page))
        if built.estimated:
            said.append(
                "no tokenizer loaded: the prompts' text tokens are estimated (one per word, number group or "
                "punctuation run), so the prompt, prefill and KV token counts are estimates; which items the radix "
                "cache serves is not"
            )
        return tuple(said)

    def _assumed(self, point: _KvPoint, pool_mb: int) -> tuple[int, ...]:
        """The assumptions a row's figures depend on: the lease lifetimes where its pool can miss, the
        radix replay's where it evicts (and its batch always), the token estimate everywhere."""
        out: list[int] = []
        n = len(self.request.assumptions)
        if pool_mb < self.no_miss_mb:  # from it up no alloc can miss, whatever the leases' lifetimes
            out.extend(range(n))
        if self.built is not None:
            out.append(n)  # the radix replay's lifetimes and outputs: its batch, and its hits where it evicts
            if self.built.estimated:
                out.append(n + 1)
        return tuple(out)


def embedding_at(looks: caches._Lookups, sizes: Sequence[int]) -> list[tuple[int, int, int]]:
    """``(hits, encoder tokens saved, lookups)`` of the embedding cache at each of ``sizes`` bytes, as its
    report reads them at the deployment's size: the one-pass curve where it is exact, else a replay at each."""
    from mmpool_cli.caches.replay import one_pass, replay

    exact = one_pass(looks.neutral())
    if exact is not None:
        curve = caches.one_pass_curve(looks, exact, 0)
        at = [curve.at(size) if size > 0 else (0, 0) for size in sizes]
    else:
        at = [replay(looks.neutral(), size) if size > 0 else (0, 0) for size in sizes]
    return [(h, w, caches.embedding_lookups_at(looks, size)) for (h, w), size in zip(at, sizes, strict=True)]


def settings_of(values: dict[str, int]) -> tuple[str, ...]:
    """The lines to copy into the launch for a split."""
    return (
        f"export SGLANG_MM_FEATURE_CACHE_MB={values[POOL]}",
        f"export SGLANG_VLM_CACHE_SIZE_MB={values[EMBEDDING]}",
        f"--max-total-tokens {values[KV]}",
    )


@dataclass(frozen=True)
class _Today:
    values: dict[str, int] | None  # None: today's KV is unknown (no --max-total-tokens, no --budget)
    pool_mb: int
    embedding_mb: int


def _today(request: TuneRequest, setup: PoolSetup) -> _Today:
    req = request.cache
    emb_bytes, _ = caches.embedding_size(req)
    emb_mb = emb_bytes // MiB
    kv = req.prefix.capacity_tokens
    return _Today(None if kv is None else {KV: kv, POOL: setup.budget_mb, EMBEDDING: emb_mb}, setup.budget_mb, emb_mb)


def budget(request: TuneRequest, setup: PoolSetup) -> tuple[int, str]:
    """The bytes per rank to divide, and where they come from: ``--budget``, else today's launch."""
    if request.budget_bytes is not None:
        return request.budget_bytes, f"--budget {request.budget_text or request.budget_bytes}"
    req = request.cache
    kv = req.prefix.capacity_tokens
    cell = req.shape.kv_cell_bytes
    if kv is None:
        raise MmpoolError(
            "mmpool tune: the memory to divide is unknown: give --budget SIZE (the GPU memory per rank the KV cache, "
            "the embedding cache and the pool share), or --max-total-tokens N (today's KV capacity, which SGLang "
            "prints at start-up as max_total_num_tokens) to divide today's launch's"
        )
    assert cell
    today = _today(request, setup)
    total = kv * cell + today.pool_mb * MiB + today.embedding_mb * MiB
    return total, (
        f"today's launch: --max-total-tokens {kv} × {cell:,} B a token + SGLANG_MM_FEATURE_CACHE_MB={today.pool_mb} "
        f"+ SGLANG_VLM_CACHE_SIZE_MB={today.embedding_mb}"
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
    scorer = Scorer(request, setup)
    total, origin = budget(request, setup)
    today = _today(request, setup)
    curve = scorer.pool_curve()
    pools = _pool_choices(curve, request.points)
    if setup.lowest_mb <= today.pool_mb <= setup.highest_mb:
        pools.append(today.pool_mb)
    # the size from which the embedding cache never evicts, with every item looked up (no KV point looks up more)
    every = caches.embedding_lookups(request.cache, scorer.tokens, scorer.width, set())
    widest = -(-never_evicts(every.neutral()) // MiB) if scorer.groups else 0
    embeddings = [*mib_grid(0, widest, request.points), today.embedding_mb]
    extra = [] if today.values is None else [{POOL: today.values[POOL], EMBEDDING: today.values[EMBEDDING]}]
    candidates = []
    choices = {POOL: sorted(set(pools)), EMBEDDING: sorted(set(embeddings))}
    for combo, left in splits(total, choices, lambda _name, mb: mb * MiB, extra):
        kv = scorer.kv_tokens(left)
        if kv >= scorer.page:
            candidates.append({KV: kv, **combo})
    return scorer, total, origin, candidates, today


def tune(request: TuneRequest, setup: PoolSetup) -> TuneReport:
    """Every candidate split of the budget scored; the front and the recommendation."""
    scorer, total, origin, candidates, today = _scored(request, setup)
    notes = [TuneNote(n.code, n.severity, n.message) for n in request.cache.notes]
    splits_ = list(candidates)
    if today.values is not None:
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
            if used > total:
                notes.append(
                    TuneNote(
                        "tune-today-over-budget",
                        "warning",
                        f"today's launch takes {used:,} B per rank, more than the {total:,} B divided",
                    )
                )
            splits_ = [s for s in splits_ if s != today.values] + [today.values]
    if not splits_:
        raise MmpoolError(
            f"mmpool tune: {total:,} B per rank leaves no KV token beside the smallest pool and embedding cache; "
            "give a larger --budget"
        )
    rows = scorer.rows(splits_, today.values)
    marked, status = mark(rows, request.objective)
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
    today = _today(request, setup)
    if values is None:
        if today.values is None:
            raise MmpoolError(
                "today's KV capacity is unknown: give --max-total-tokens N (SGLang prints max_total_num_tokens at "
                "start-up)"
            )
        values = today.values
    missing = [m.name for m in MEMORIES if m.name not in values]
    if missing:
        raise MmpoolError(f"a split names every memory: {', '.join(missing)} missing")
    return scorer.rows([values], today.values)[0]


def cache_request_at(req: CacheRequest, values: dict[str, int]) -> CacheRequest:
    """``req`` as ``mmpool cache`` would be given a split's settings (its KV capacity and embedding cache)."""
    environ = dict(req.environ) | {"SGLANG_VLM_CACHE_SIZE_MB": str(values[EMBEDDING])}
    return replace(req, prefix=replace(req.prefix, capacity_tokens=values[KV]), environ=environ)
