"""The smallest whole-MiB ``SGLANG_MM_FEATURE_CACHE_MB`` whose simulated fallback meets a target.

Fallback is not monotonic in the budget: a bigger pool places leases elsewhere, and best fit
can then split a range that a smaller pool kept whole. So the search says how it found its
answer. ``bisect`` gallops up from the smallest budget SGLang accepts and bisects, then checks
that the budget one MiB below misses the target: the answer is the smallest under the
assumption that more memory never hurts, and exact wherever that holds. ``scan`` also simulates
every budget below it and returns the first that meets the target: exact, and slower.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Literal

from mmpool_cli.core.units import MiB
from mmpool_cli.simulate.allocator import PoolRules
from mmpool_cli.simulate.cuda_ipc import MAX_POOL_BYTES
from mmpool_cli.simulate.replay import Event, PoolLayout, SimResult, simulate

Basis = Literal["items", "bytes"]
Method = Literal["bisect", "scan"]
MAX_BUDGET_MB = 1 << 20  # 1 TiB for the node: more HBM than any GPU has


@dataclass(frozen=True)
class Trial:
    """One simulated budget."""

    mb: int
    items: int
    fallback_items: int
    bytes: int
    fallback_bytes: int

    def rate(self, basis: Basis) -> Fraction:
        if basis == "items":
            return Fraction(self.fallback_items, self.items) if self.items else Fraction(0)
        return Fraction(self.fallback_bytes, self.bytes) if self.bytes else Fraction(0)


@dataclass
class BudgetSearch:
    """The outcome of a search: the smallest budget (None if none up to the cap) and every trial."""

    target: Fraction
    basis: Basis
    method: Method
    smallest_mb: int | None
    lowest_valid_mb: int
    trials: list[Trial] = field(default_factory=list)


def layout_for(mb: int, workers: int, data_start: int, recycle_ns: int, rules: PoolRules) -> PoolLayout:
    """The pools SGLang creates for ``SGLANG_MM_FEATURE_CACHE_MB=mb``."""
    return PoolLayout(workers, mb * MiB // workers, data_start, recycle_ns, rules)


def trial(events: Sequence[Event], mb: int, workers: int, data_start: int, recycle_ns: int, rules: PoolRules) -> Trial:
    """Simulate ``events`` at budget ``mb``."""
    result: SimResult = simulate(events, layout_for(mb, workers, data_start, recycle_ns, rules))
    return Trial(
        mb,
        result.total("items"),
        result.total("fallback_items"),
        result.total("bytes"),
        result.total("fallback_bytes"),
    )


def smallest_budget(
    events: Sequence[Event],
    *,
    workers: int,
    data_start: int,
    recycle_ns: int,
    rules: PoolRules,
    target: Fraction = Fraction(0),
    basis: Basis = "items",
    method: Method = "bisect",
) -> BudgetSearch:
    """Search the budgets SGLang accepts (whole MiB) for the smallest that meets ``target``."""
    lowest = (data_start + 1) * workers
    lowest = -(-lowest // MiB)
    highest = min(MAX_BUDGET_MB, MAX_POOL_BYTES * workers // MiB)
    search = BudgetSearch(target, basis, method, None, lowest)
    tried: dict[int, Trial] = {}

    def meets(mb: int) -> bool:
        if mb not in tried:
            tried[mb] = trial(events, mb, workers, data_start, recycle_ns, rules)
        return tried[mb].rate(basis) <= target

    if not meets(highest):
        search.trials = sorted(tried.values(), key=lambda t: t.mb)
        return search  # e.g. more than 4096 features in flight: no budget avoids the slot cap
    below, above = lowest - 1, lowest  # below misses the target (or is invalid); above is the probe
    while not meets(above):
        below, above = above, min(2 * above, highest)
    while above - below > 1:
        middle = (below + above) // 2
        if meets(middle):
            above = middle
        else:
            below = middle
    if method == "scan":
        above = next((mb for mb in range(lowest, above) if meets(mb)), above)
    search.smallest_mb = above
    search.trials = sorted(tried.values(), key=lambda t: t.mb)
    return search
