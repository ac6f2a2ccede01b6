"""``mmpool tune``: one GPU's memory divided between the engine's memories, from the traffic.

The traffic is read once, as ``simulate --from`` reads it; the caches' request is the one ``cache``
builds from it (``usecases.cache.cache_request``), so the engine scores every split with the code
both commands run. No typer, rich or torch.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from mmpool_cli.engines import DEFAULT, engine
from mmpool_cli.inputs.traffic.tune_request import TuneRequest
from mmpool_cli.tune.split import Row, TuneReport
from mmpool_cli.usecases.cache import CacheQuery, cache_request


@dataclass(frozen=True)
class TuneQuery:
    """What ``mmpool tune`` was asked, its traffic already read."""

    cache: CacheQuery  # the items, prompts and launch, as ``cache`` is asked
    pools: Any  # the engine's plan request for its pool, as ``simulate`` makes it
    leases: Any  # the pool's traffic (leases), as ``simulate --from`` converts it
    budget_bytes: int | None
    budget_text: str | None
    objective: str
    points: int
    assumptions: tuple[str, ...] = ()
    events: Any = None  # a --trace's events (then ``leases`` is empty)


def request_of(q: TuneQuery) -> TuneRequest:
    """The engine's request: the caches' as ``cache`` builds it, the pool's as ``simulate`` does."""
    return TuneRequest(
        cache=cache_request(q.cache),
        pools=q.pools,
        leases=q.leases,
        events=q.events,
        budget_bytes=q.budget_bytes,
        budget_text=q.budget_text,
        objective=q.objective,
        points=q.points,
        environ=q.cache.environ,
        source=q.cache.source,
        assumptions=q.assumptions,
    )


def tune(q: TuneQuery, engine_name: str = DEFAULT) -> TuneReport:
    """Every candidate split scored, the front and the recommendation.

    Raises:
        MmpoolError: no budget to divide, or input ``cache`` or ``simulate`` refuses (exit 2).
    """
    return engine(engine_name).tune(request_of(q))


def tune_at(q: TuneQuery, values: dict[str, int] | None = None, engine_name: str = DEFAULT) -> Row:
    """One split's row (None: the launch's own settings), scored as ``tune`` scores its rows."""
    return engine(engine_name).tune_at(request_of(q), values)
