"""What ``mmpool simulate`` reports: the figures of one run, the budget search, as versioned data."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from fractions import Fraction
from typing import TYPE_CHECKING, Any

from mmpool_cli.core.findings import Finding, Severity
from mmpool_cli.core.reports import Settings
from mmpool_cli.pools.allocator import PoolRules
from mmpool_cli.pools.budget_search import Basis, BudgetSearch
from mmpool_cli.pools.replay import SIM_SCHEMA_VERSION, SimResult

if TYPE_CHECKING:
    from mmpool_cli.pools.curve import PoolCurve


@dataclass(frozen=True)
class PoolSetup:
    """The pools an engine's plan makes, as the simulator takes them (``Engine.simulation_setup``)."""

    workers: int
    per_worker_bytes: int | None  # None where the engine refuses the budget (``refused`` says why)
    header_bytes: int
    consumers: int
    tp_size: int
    rules: PoolRules
    recycle_ns: int
    recycle_source: str
    budget_bytes: int
    budget_mb: int
    refused: str | None
    version: str
    chosen: str
    # what the engine's plan finds for this budget, layout and environment
    findings: list[Finding] = field(default_factory=list)
    layouts: Any = None  # mb -> PoolLayout: the pools the engine makes for each whole-MiB budget
    lowest_mb: int = 1  # the budgets the engine and its plan accept
    highest_mb: int = 1
    refused_every: str | None = None  # highest_mb < lowest_mb: why the plan refuses the lowest budget
    header_for: Any = None  # consumers -> the data_start of the engine's cuda_ipc pools (None: cuda_vmm)


def _rate(part: int, whole: int) -> float:
    return part / whole if whole else 0.0


@dataclass
class SimulationReport:
    """One ``mmpool simulate`` run: the pools, the traffic, what happened, and the budget search."""

    source: dict[str, Any]  # {"trace": path} or {"synthetic": the workload's parameters}
    budget_bytes: int
    sglang_mm_feature_cache_mb: int
    tp_size: int
    consumers: int
    recycle_source: str
    result: SimResult | None  # None where SGLang refuses the current budget
    refused: str | None
    target: Fraction
    basis: Basis
    search: BudgetSearch | None = None
    settings: Settings | None = None  # for the smallest budget found
    transport: str = field(kw_only=True)  # the allocator simulated (PoolRules.allocator)
    # the release whose pool is simulated, and how it was chosen
    sglang_version: str = field(kw_only=True)
    sglang_version_chosen: str = "newest"
    findings: list[Finding] = field(default_factory=list)  # what plan finds for this budget and layout
    model: str | None = None
    kv_cost: Any = None  # the KV-cache cost of the budget found (with --model DIR)
    events_data: Any = None  # the events, kept for a picture
    curve: PoolCurve | None = None  # --curve: the pool's curve

    @property
    def status(self) -> str:
        """``ok`` when the fallback meets the target and no finding is an error."""
        errors = any(f.severity is Severity.error for f in self.findings)
        return "ok" if self.meets_target and not errors else "fail"

    def fallback_rate(self) -> Fraction | None:
        r = self.result
        if r is None:
            return None
        num, den = (
            (r.total("fallback_items"), r.total("items"))
            if self.basis == "items"
            else (r.total("fallback_bytes"), r.total("bytes"))
        )
        return Fraction(num, den) if den else Fraction(0)

    @property
    def meets_target(self) -> bool:
        rate = self.fallback_rate()
        return rate is not None and rate <= self.target

    def to_data(self, events: bool = False) -> dict[str, Any]:
        """The versioned JSON payload; bytes are integers, rates are derived from the counts beside them."""
        data: dict[str, Any] = {
            "schema_version": SIM_SCHEMA_VERSION,
            "status": self.status,
            "sglang_version": self.sglang_version,
            "sglang_version_chosen": self.sglang_version_chosen,
            "transport": self.transport,
            "source": self.source,
            "budget_bytes": self.budget_bytes,
            "sglang_mm_feature_cache_mb": self.sglang_mm_feature_cache_mb,
            "tp_size": self.tp_size,
            "consumers": self.consumers,
            "recycle_interval_ns": None if self.result is None else self.result.layout.recycle_ns,
            "recycle_interval_source": self.recycle_source,
            "refused": self.refused,
            "target": {"basis": self.basis, "fallback_rate": float(self.target), "met": self.meets_target},
            "findings": [_finding_data(f) for f in self.findings],
        }
        if self.result is not None:
            data |= result_data(self.result)
        if self.search is not None:
            data["smallest_budget"] = search_data(self.search, self.settings)
            data["smallest_budget"]["kv_cost"] = None if self.kv_cost is None else dataclasses.asdict(self.kv_cost)
        if self.curve is not None:
            data["curve"] = [p.to_data() for p in self.curve.points]
            data["curve_range"] = self.curve.to_data()
        offsets = None if self.result is None else self.result.offsets
        if events and self.result is not None and offsets is not None:
            r = self.result
            data["events"] = [
                {"id": key, "worker": w, "offset": off}
                for key, w, off in zip(r.alloc_ids or (), r.alloc_workers or (), offsets, strict=True)
            ]
        return data


def _finding_data(f: Finding) -> dict[str, Any]:
    return {"severity": f.severity.value, "code": f.code, "message": f.message, "location": f.location}


def result_data(r: SimResult) -> dict[str, Any]:
    """The figures of one simulation."""
    layout = r.layout
    items, fb_items = r.total("items"), r.total("fallback_items")
    nbytes, fb_bytes = r.total("bytes"), r.total("fallback_bytes")
    space_misses = fb_items - r.total("slot_cap_misses")
    span = r.duration_ns * layout.workers
    return {
        "workers": layout.workers,
        "per_worker_bytes": layout.memory_size,
        "header_bytes": layout.data_start,
        "usable_bytes_per_worker": layout.usable_bytes,
        "max_inflight_slices": layout.max_leases if layout.transport == "cuda_ipc" else None,
        "lease_control_bytes": layout.control_bytes,
        "event_count": r.events,
        "duration_ns": r.duration_ns,
        "items": {
            "total": items,
            "fallback": fb_items,
            "fallback_rate": _rate(fb_items, items),
            "slot_cap_misses": r.total("slot_cap_misses"),
            "space_misses": space_misses,
        },
        "bytes": {"total": nbytes, "fallback": fb_bytes, "fallback_rate": _rate(fb_bytes, nbytes)},
        "occupancy": {
            "peak_bytes": max(w.peak_bytes for w in r.workers),
            "peak_leases": max(w.peak_leases for w in r.workers),
            # rounded up: a pool that held anything never reads as empty on average
            "mean_bytes": -(-r.total("occupancy_area") // span) if span else None,
        },
        "fragmentation": {
            "space_misses": space_misses,
            "misses_with_enough_free_bytes": r.total("fragmented_misses"),
            "mean_free_bytes_at_miss": r.total("space_miss_free_bytes") // space_misses if space_misses else None,
            "mean_largest_free_range_at_miss": (
                r.total("space_miss_largest_free") // space_misses if space_misses else None
            ),
        },
        "per_worker": [
            {
                "worker": w.worker,
                "items": w.items,
                "fallback": w.fallback_items,
                "slot_cap_misses": w.slot_cap_misses,
                "bytes": w.bytes,
                "fallback_bytes": w.fallback_bytes,
                "peak_bytes": w.peak_bytes,
                "peak_leases": w.peak_leases,
                "mean_bytes": -(-w.occupancy_area // r.duration_ns) if r.duration_ns else None,
            }
            for w in r.workers
        ],
    }


def search_data(search: BudgetSearch, settings: Settings | None) -> dict[str, Any]:
    """The budget search: the answer, how it was found, and every budget it simulated."""
    return {
        "sglang_mm_feature_cache_mb": search.smallest_mb,
        "upper_mb": search.upper_mb,
        "fragile_mb": search.fragile_mb,
        "method": search.method,
        "estimate": search.method == "bisect",
        "exact": search.exact and search.method != "bisect",
        "checked_mb": None if search.checked_mb is None else list(search.checked_mb),
        # the work: replayed events spent, the limit, and (not exact) the budgets left and their cost at most
        "replayed_events": search.spent_events,
        "limit_events": search.limit_events,
        "undecided": None
        if search.undecided is None
        else {"budgets": search.undecided[0], "from_mb": search.undecided[1], "to_mb": search.undecided[2]},
        "more_events_at_most": search.more_events if search.undecided is not None else None,
        "lowest_valid_mb": search.lowest_valid_mb,
        "top_mb": search.top_mb,
        "no_miss_mb": search.no_miss_mb,
        "settings": None if settings is None else {"env": settings.env, "args": settings.args},
        "trials": [
            {
                "mb": t.mb,
                "items": t.items,
                "fallback": t.fallback_items,
                "bytes": t.bytes,
                "fallback_bytes": t.fallback_bytes,
                "same_until_mb": t.same_until_mb,
                # stopped: the fallback passed the target, and the counts are those of the first "events"
                "stopped": t.stopped,
                "events": t.events,
            }
            for t in search.trials
        ],
    }
