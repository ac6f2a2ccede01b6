"""The replays behind ``mmpool tune``'s rows for SGLang 0.5.23, each made once per point and shared by every row.

* the **pool**: ``simulate``'s replay at each budget (``simulate --curve``'s points, by its code);
* the **radix cache** (the KV cache): ``cache``'s replay at each distinct KV capacity (from the
  capacity that never evicts up, one replay serves every capacity), spread over the cores;
* the **embedding cache** behind it: its lookups at that capacity (the items the radix cache did not
  serve), read at each candidate's size from its one-pass curve, or replayed at each size where one
  pass is not exact: what ``cache`` reads at the deployment's size.

Pure core: standard library only.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Any

from mmpool_cli.caches import prefix as radix
from mmpool_cli.core.units import MiB
from mmpool_cli.engines.sglang import cache_lookups, caches, prefix
from mmpool_cli.errors import MmpoolError
from mmpool_cli.inputs.traffic.tune_request import TuneRequest
from mmpool_cli.pools.curve import CurvePoint
from mmpool_cli.pools.report import PoolSetup
from mmpool_cli.pools.trials import no_miss_budget
from mmpool_cli.tune.split import Batches, Measures, Row

if TYPE_CHECKING:
    from mmpool_cli.traces.events import Events

KV, POOL, EMBEDDING = "kv", "pool", "embedding"
PARALLEL_FROM = 1 << 13  # replayed requests x KV points below which one process is quicker than forking workers
AHEAD_FROM = 1 << 14  # the pool's leases below which its replays are quicker here than in a forked process
_SHARED: dict[str, object] = {}  # what the forked workers replay (inherited, never pickled)


@dataclass
class _KvPoint:
    """What the radix cache and the embedding cache behind it do at one KV capacity."""

    served: int  # prompt tokens served
    items_served: int  # embedding lookups spared (served_by_prefix)
    work: int  # the embedding cache's lookups' encoder tokens, every one missing
    at: dict[int, tuple[int, int, int]] = field(default_factory=dict)  # embedding bytes -> (hits, saved, lookups)


class Scorer:
    """The traffic read once; the replays of each memory made once per point and shared by every row."""

    def __init__(self, request: TuneRequest, setup: PoolSetup, ahead: Sequence[int] | None = None) -> None:
        """``ahead``: the pool's budgets (beside its curve) to replay on another core while the rest is read."""
        from mmpool_cli.core.collector import paused

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
        self.kv: dict[int, _KvPoint] = {}
        self.pool: dict[int, CurvePoint] = {}
        self._jobs: int | None = None  # the pool's replays: forked over every core (None), or 1 process
        self._ahead: _PoolAhead | None = None
        # the pool's replays need only its leases: on another core while the prompts are built here
        self._ahead = _PoolAhead(self, ahead) if ahead is not None else None
        with paused(keep=True):  # the traffic's prompts and keys, kept for every point: no pass finds a cycle
            self.page = max(1, req.prefix.page_size)
            self.width = caches._width(req)
            self.tokens = caches.item_tokens(req)
            self.groups = list(prefix.requests_of(req.items))
            self.batches = cache_lookups.modal_batches(req, self.tokens, self.groups)  # once for every KV point
            self.built = prefix.build(req, self.tokens, self.groups) if req.prompts else None
            behind = cache_lookups.Behind(self.batches, self.groups, self.built) if self.built is not None else None
            self.behind = behind if behind is not None and behind.exact else None  # else covered_by, item by item
            requests = self.built.requests if self.built is not None else []
            self.fit = Batches([-(-(len(r.tokens) + len(r.output)) // self.page) * self.page for r in requests])
            saturated = (
                radix.never_evicts(requests, radix.Radix, self.built.order, page_size=self.page)
                if self.built is not None and requests
                else 0
            )
            self.saturated = max(-(-saturated // self.page) * self.page, self.page)  # whole pages, as the pool is

    # the pool: simulate's replay at each budget
    @cached_property
    def events(self) -> Events:
        """The pool's traffic as columns."""
        from mmpool_cli.inputs.traffic import writer
        from mmpool_cli.traces.events import as_events

        request = self.request
        return as_events(request.events if request.events is not None else writer.events(request.leases))

    @cached_property
    def no_miss_mb(self) -> int:
        """The budget from which the pool never misses, whatever the leases' lifetimes."""
        ahead = self._ahead.result() if self._ahead is not None else None
        if ahead is not None:
            return ahead.no_miss_mb
        setup = self.setup
        return no_miss_budget(self.events, setup.layouts, setup.lowest_mb, setup.highest_mb)

    def pool_curve(self) -> list[CurvePoint]:
        """The pool's curve as ``simulate --curve`` makes it by default (its range from the traffic); where the
        traffic's largest feature fits no budget (it always falls back), every budget SGLang accepts."""
        ahead = self._ahead.result() if self._ahead is not None else None
        if ahead is not None:
            for p in ahead.points:
                self.pool.setdefault(p.budget_mb, p)
            return list(ahead.curve)
        return self._pool_curve()

    def _pool_curve(self) -> list[CurvePoint]:
        from mmpool_cli.pools.curve import largest_alloc_budget
        from mmpool_cli.pools.curve_range import CurveRange, pool_curve
        from mmpool_cli.pools.executors import LocalExecutor

        setup = self.setup
        wanted = CurveRange()
        if (
            setup.lowest_mb
            <= setup.highest_mb
            < largest_alloc_budget(self.events, setup.layouts, setup.lowest_mb, setup.highest_mb)
        ):
            hi = min(self.no_miss_mb, setup.highest_mb)
            wanted = CurveRange(setup.lowest_mb, hi, f"{setup.lowest_mb}:{hi}")
        curve = pool_curve(wanted, self.events, setup, executor=LocalExecutor(self._jobs))
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
            self.events, self.setup.layouts, todo, top=self.setup.highest_mb, executor=LocalExecutor(self._jobs)
        ):
            self.pool[p.budget_mb] = p

    # the KV cache: the radix replay at each capacity, and the embedding cache behind it
    def kv_point(self, capacity: int) -> int:
        """The capacity whose replay answers ``capacity``: from the one that never evicts up, every capacity
        serves what that one serves (``caches.prefix``); with no radix cache, one answer for all."""
        off = self.built is None or self.req.prefix.disabled
        return 0 if off else min(capacity, self.saturated)

    def points(self, wanted: dict[int, set[int]]) -> None:
        """The KV points of ``wanted`` (capacity -> the embedding cache's sizes read there) not made yet, each
        made whole (``point``) and spread over the cores: the radix replays and the embedding caches behind."""
        todo: dict[int, set[int]] = {}
        for capacity, sizes in wanted.items():
            point = self.kv_point(capacity)
            have = self.kv.get(point)
            missing = sizes - set(have.at) if have is not None else sizes
            if missing:
                todo.setdefault(point, set()).update(missing | (set(have.at) if have is not None else set()))
        asked = [(p, tuple(sorted(sizes))) for p, sizes in sorted(todo.items())]
        for (p, _), got in zip(asked, self._map(asked), strict=True):
            self.kv[p] = got

    def point(self, capacity: int, sizes: Sequence[int]) -> _KvPoint:
        """The radix cache at ``capacity`` tokens, the embedding cache's lookups behind it, read at ``sizes``."""
        from mmpool_cli.core.collector import paused

        with paused():  # lists of ints and tuples, no cycle
            return self._point(capacity, sizes)

    def _point(self, capacity: int, sizes: Sequence[int]) -> _KvPoint:
        built = self.built
        if built is None or self.req.prefix.disabled:
            served = [0] * (len(built.requests) if built is not None else 0)
        else:
            served = prefix.served_at(built, capacity, self.page)
        if self.behind is not None:
            looks, spared = self.behind.lookups(served, self.width)
        else:
            covered = prefix.covered_by(built, served) if built is not None else set()
            looks = cache_lookups.embedding_lookups(self.req, self.tokens, self.width, covered, self.batches)
            spared = prefix.spared(self.groups, covered)
        at = dict(zip(sizes, embedding_at(looks, sizes), strict=True))
        return _KvPoint(sum(served), spared, cache_lookups.looked_up_work(looks), at)

    def _map(self, asked: Sequence[tuple[int, tuple[int, ...]]]) -> list[_KvPoint]:
        """``point`` at each of ``asked``, in order: in forked workers where it pays (each its own replay)."""
        import multiprocessing

        from mmpool_cli.core.workers import default_jobs

        slots = min(default_jobs(), len(asked))
        requests = len(self.built.requests) if self.built is not None else 0
        if slots <= 1 or "fork" not in multiprocessing.get_all_start_methods() or requests * len(asked) < PARALLEL_FROM:
            return [self.point(p, sizes) for p, sizes in asked]
        from mmpool_cli.core.workers import worker_start

        _SHARED["scorer"] = self
        try:
            with multiprocessing.get_context("fork").Pool(slots, initializer=worker_start) as pool:
                return pool.map(_point_shared, asked, chunksize=1)
        finally:
            _SHARED.clear()

    def kv_tokens(self, nbytes: int) -> int:
        """The tokens SGLang makes of ``nbytes`` of KV memory: ``(bytes // cell) // page * page``."""
        return nbytes // self.cell // self.page * self.page

    def rows(self, splits_: Sequence[dict[str, int]], today: dict[str, int] | None = None) -> list[Row]:
        """The row of each split (memory name -> setting), the replays each needs made once."""
        self.pool_at(s[POOL] for s in splits_)
        by_kv: dict[int, set[int]] = {}
        for s in splits_:
            by_kv.setdefault(s[KV], set()).add(s[EMBEDDING] * MiB)
        self.points(by_kv)
        return [self.row(s, s == today) for s in splits_]

    def row(self, values: dict[str, int], today: bool = False) -> Row:
        kv, pool_mb, emb_mb = values[KV], values[POOL], values[EMBEDDING]
        self.points({kv: {emb_mb * MiB}})
        point, pool = self.kv[self.kv_point(kv)], self.pool[pool_mb]
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
            batch=self.fit.at(kv),
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
        said.append("the radix cache: " + prefix._assumed(built, self.page).removeprefix("assumed: "))
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
        if self.built is None:
            out.append(n)  # no prompts: no radix cache, no batch
        else:
            out.append(n)  # the radix replay's lifetimes and outputs: its batch, and its hits where it evicts
            if self.built.estimated:
                out.append(n + 1)
        return tuple(out)


REPLAYED_UP_TO = 16  # sizes read at a point up to which a replay at each is quicker than the one-pass curve


def embedding_at(looks: cache_lookups._Lookups, sizes: Sequence[int]) -> list[tuple[int, int, int]]:
    """``(hits, encoder tokens saved, lookups)`` of the embedding cache at each of ``sizes`` bytes, as its
    report reads them at the deployment's size: the one-pass curve where it is exact, else a replay at each.
    At a few sizes, each a replay: the same figures where one pass is exact (``caches.replay.one_pass``)
    and each key has one size, without the curve's pass over every size."""
    from mmpool_cli.caches.replay import one_pass, replay, replay_many

    lk = looks.neutral()
    wanted = sorted({size for size in sizes if size > 0})
    at: dict[int, tuple[int, int]] = {}
    if wanted and len(wanted) <= REPLAYED_UP_TO and cache_lookups.one_size(looks):
        at = dict(zip(wanted, replay_many(lk, wanted, jobs=1), strict=True))
    elif wanted:
        exact = one_pass(lk)
        if exact is not None:
            curve = caches.one_pass_curve(looks, exact, 0)
            at = {size: curve.at(size) for size in wanted}
        else:
            at = {size: replay(lk, size) for size in wanted}
    lookups = cache_lookups.embedding_lookups_many(looks, sizes)
    return [(*at.get(size, (0, 0)), n) for size, n in zip(sizes, lookups, strict=True)]


def settings_of(values: dict[str, int]) -> tuple[str, ...]:
    """The lines to copy into the launch for a split."""
    return (
        f"export SGLANG_MM_FEATURE_CACHE_MB={values[POOL]}",
        f"export SGLANG_VLM_CACHE_SIZE_MB={values[EMBEDDING]}",
        f"--max-total-tokens {values[KV]}",
    )


def _point_shared(asked: tuple[int, tuple[int, ...]]) -> _KvPoint:
    scorer = _SHARED["scorer"]
    assert isinstance(scorer, Scorer)
    return scorer.point(*asked)


@dataclass(frozen=True)
class _Ahead:
    no_miss_mb: int
    curve: list[CurvePoint]
    points: list[CurvePoint]  # the curve's and the budgets asked beside it


class _PoolAhead:
    """The pool's curve and replays at given budgets, made in a forked process while the caller goes on
    (where the traffic is large enough to pay for a fork); ``result()`` is None where it was not."""

    def __init__(self, scorer: Scorer, budgets: Sequence[int]) -> None:
        import multiprocessing

        from mmpool_cli.core.workers import default_jobs

        self._pool: Any = None
        self._job: Any = None
        self._got: _Ahead | None = None
        leases = len(scorer.request.leases) if scorer.request.events is None else len(scorer.request.events)
        if default_jobs() < 2 or "fork" not in multiprocessing.get_all_start_methods() or leases < AHEAD_FROM:
            return
        from mmpool_cli.core.workers import worker_start

        _SHARED["ahead"] = (scorer, tuple(budgets))
        try:
            self._pool = multiprocessing.get_context("fork").Pool(1, initializer=worker_start)
            self._job = self._pool.apply_async(_ahead_shared)
        finally:
            _SHARED.clear()

    def result(self) -> _Ahead | None:
        """What the forked process made (None: made here instead, by the caller)."""
        if self._job is not None:
            job, self._job = self._job, None
            try:
                self._got = job.get()
            except Exception:  # noqa: BLE001 - made again here, where any error is raised as the command's own
                self._got = None
            finally:
                self._pool.close()
                self._pool.join()
        return self._got


def _ahead_shared() -> _Ahead:
    shared = _SHARED["ahead"]
    assert isinstance(shared, tuple)
    scorer, budgets = shared
    assert isinstance(scorer, Scorer)
    scorer._jobs = 1  # a worker has no workers of its own
    curve = scorer._pool_curve()
    scorer.pool_at(budgets)
    return _Ahead(scorer.no_miss_mb, curve, list(scorer.pool.values()))
