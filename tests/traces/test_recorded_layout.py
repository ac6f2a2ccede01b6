"""simulate.recorded_layout: the whole-MiB budget that SGLang split into a recording's pools."""

from __future__ import annotations

import pytest

from mmpool_cli.core.units import MiB
from mmpool_cli.traces.bounded import TraceError
from mmpool_cli.traces.recorded_layout import budget_mb, of_pools


@pytest.mark.parametrize("workers", [1, 2, 3, 7, 1024])
@pytest.mark.parametrize("mb", [1, 63, 64, 1000, 1024, 4099])
def test_every_budgets_split_gives_back_that_budget(workers: int, mb: int) -> None:
    share = mb * MiB // workers  # SGLang's split
    found = budget_mb(share, workers, "cuda_ipc")
    assert found is not None and found * MiB // workers == share  # the same pools again
    assert found <= mb  # the smallest budget making them (at 1024 workers, neighbours may share a split)


def test_an_uneven_split_rounds_up_where_pools_times_workers_rounds_down() -> None:
    assert budget_mb(22_369_621, 3, "cuda_ipc") == 64
    assert (22_369_621 * 3) // MiB == 63  # the old advice's budget, and another split
    assert budget_mb(22_369_622, 3, "cuda_ipc") is None  # no whole MiB splits into it
    assert budget_mb(0, 3, "cuda_ipc") is None


def test_cuda_vmm_pools_are_the_share_rounded_down_to_the_granularity() -> None:
    # 100 MiB over 3 workers: 34,952,533 B each, an allocation of 32 MiB at 2 MiB granularity
    assert 100 * MiB // 3 // (2 * MiB) * (2 * MiB) == 32 * MiB
    assert budget_mb(32 * MiB, 3, "cuda_vmm") == 96  # the smallest budget giving 32 MiB allocations
    assert budget_mb(33 * MiB, 3, "cuda_vmm") is None  # not a multiple of the granularity
    assert budget_mb(33 * MiB, 3, "cuda_vmm", MiB) == 99
    assert budget_mb(32 * MiB + 4096, 3, "cuda_vmm", 4096) is None  # 96 MiB is a share short, 97 MiB 4 KiB over


def test_a_manifest_without_a_layout_is_a_trace_error() -> None:
    with pytest.raises(TraceError, match="pool-1-0.json: the manifest's layout is not a pool's"):
        of_pools([{"file": "pool-1-0.json", "transport": "cuda_ipc", "layout": {}, "recycle_interval_s": 0.05}])
