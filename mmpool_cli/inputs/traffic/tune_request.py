"""What ``mmpool tune`` asks an engine: the traffic as ``cache`` and ``simulate`` read it, and the memory to divide.

Pure core: standard library only.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from mmpool_cli.inputs.traffic.cache_request import CacheRequest
from mmpool_cli.inputs.traffic.writer import Lease

DEFAULT_POINTS = 8  # settings per memory in the candidate grid (its rows: about their product)


@dataclass(frozen=True)
class TuneRequest:
    """The traffic and launch that ``mmpool cache`` and ``mmpool simulate`` would each be given, and the split asked."""

    cache: CacheRequest  # what ``cache`` builds: the items, prompts, prefix options, model shape, environment
    pools: Any  # the engine's plan request for its pool (SGLang's ``PlanRequest``; None where it has none)
    leases: Sequence[Lease] = ()  # the pool's traffic, as ``simulate --from`` converts it
    events: Any = None  # or its events, as ``simulate --trace`` reads them (then ``leases`` is unused)
    budget_bytes: int | None = None  # --budget: the memory to divide per rank (None: today's launch's)
    budget_text: str | None = None  # --budget as given, for the report
    objective: str = "no-fallback"
    points: int = DEFAULT_POINTS
    environ: Mapping[str, str] = field(default_factory=dict)
    source: str = ""  # what was read, for the report
    summary: Any = None  # the conversion's summary (its lifetimes and assumptions), where traffic was converted
    assumptions: tuple[str, ...] = ()  # what reading the pool's traffic assumed (its leases' lifetimes), said once
