"""``mmpool simulate``: replay traffic through the engine's pools, and search for the smallest budget.

The engine turns the request into pools (``Engine.simulation_setup``); the neutral simulator
(``mmpool_cli.simulate``) replays the traffic through them. No typer, rich or torch.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from mmpool_cli.engines import DEFAULT, engine
from mmpool_cli.errors import MmpoolError
from mmpool_cli.simulate.budget_search import Basis, Method, smallest_budget
from mmpool_cli.simulate.replay import Event, PoolLayout
from mmpool_cli.simulate.replay import simulate as replay
from mmpool_cli.simulate.sim_report import SimulationReport

# workers -> (the source as the report names it, its events): read once the pools are known
Traffic = Callable[[int], tuple[dict[str, Any], list[Event]]]


@dataclass(frozen=True)
class SimulateRequest:
    """One simulation: the engine's plan request for the pools, the traffic, and what to report."""

    pools: Any  # the engine's plan request
    environ: Mapping[str, str]
    traffic: Traffic
    target: Fraction = Fraction(0)
    basis: Basis = "items"
    method: Method = "bisect"
    smallest_budget: bool = False
    record_events: bool = False
    engine_name: str = DEFAULT


def simulate(request: SimulateRequest) -> SimulationReport:
    """Replay the traffic through the pools the request makes; usage errors raise ``MmpoolError``."""
    eng = engine(request.engine_name)
    refused_release = eng.simulation_refusal(request.pools.sglang_version, request.pools.transport)
    if refused_release is not None:
        raise MmpoolError(refused_release)
    pools = eng.simulation_setup(request.pools, request.environ)
    source, timeline = request.traffic(pools.workers)
    result = None
    if pools.per_worker_bytes is not None:
        layout = PoolLayout(pools.workers, pools.per_worker_bytes, pools.header_bytes, pools.recycle_ns, pools.rules)
        result = replay(timeline, layout, record=request.record_events)
    report = SimulationReport(
        source=source,
        budget_bytes=pools.budget_bytes,
        sglang_mm_feature_cache_mb=pools.budget_mb,
        tp_size=pools.tp_size,
        consumers=pools.consumers,
        recycle_source=pools.recycle_source,
        result=result,
        refused=pools.refused,
        target=request.target,
        basis=request.basis,
        transport=pools.rules.allocator,
        sglang_version=pools.version,
        sglang_version_chosen=pools.chosen,
    )
    if request.smallest_budget:
        found = smallest_budget(
            timeline,
            workers=pools.workers,
            data_start=pools.header_bytes,
            recycle_ns=pools.recycle_ns,
            rules=pools.rules,
            target=request.target,
            basis=request.basis,
            method=request.method,
        )
        report.search = found
        if found.smallest_mb is not None:
            report.settings = eng.settings_for_budget(request.pools, found.smallest_mb)
    return report
