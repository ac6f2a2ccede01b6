"""The layout a recording's pools had, as the ``simulate`` flags that replay it.

A pool's manifest gives its bytes (``memory_size``), its consumers and its recycle interval; the
recording's pools are its workers. The budget is what SGLang split: the whole-MiB
``SGLANG_MM_FEATURE_CACHE_MB`` whose share per worker is ``memory_size`` (for cuda_vmm, rounded down
to the granularity). A budget that does not split evenly (64 MiB over 3 workers) is found by
rounding up, never by ``memory_size × workers`` (which floors to the MiB below and another share).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from mmpool_cli.core.units import MiB
from mmpool_cli.traces.bounded import TraceError

RECYCLE_VARIABLE = "SGLANG_MM_ITEM_MEM_POOL_RECYCLE_INTERVAL_SEC"
DEFAULT_GRANULARITY = 2 * MiB


def budget_mb(memory_size: int, workers: int, transport: str, granularity: int = DEFAULT_GRANULARITY) -> int | None:
    """The smallest whole-MiB budget whose split over ``workers`` gives pools of ``memory_size`` bytes; None if none.

    >>> budget_mb(22_369_621, 3, "cuda_ipc")  # 64 MiB // 3; 67,108,863 B would floor to 63 MiB
    64
    >>> budget_mb(1 << 20, 2, "cuda_ipc"), budget_mb(1000, 1, "cuda_ipc")
    (2, None)
    """
    if memory_size < 1 or workers < 1:
        return None
    mb = -(-memory_size * workers // MiB)  # the share of a smaller budget is below memory_size
    share = mb * MiB // workers
    if transport == "cuda_vmm":
        return mb if share // granularity * granularity == memory_size else None
    return mb if share == memory_size else None


@dataclass(frozen=True)
class RecordedLayout:
    """A recording's layout: its pools (the workers), their bytes, consumers, transport and interval."""

    workers: int
    memory_size: int
    consumers: int
    transport: str
    recycle_interval_s: float
    budget_mb: int | None  # None: no whole-MiB budget splits into these pools

    def flags(self) -> str:
        """The flags that replay at this layout, the interval's variable last."""
        size = f"--size {self.budget_mb}MiB " if self.budget_mb is not None else ""
        return (
            f"{size}--workers {self.workers} --tp {self.consumers} --transport {self.transport} with "
            f"{self.recycle_setting()}"
        )

    def recycle_setting(self) -> str:
        """The interval as the variable SGLang reads, e.g. ``SGLANG_..._SEC=0.05``."""
        return f"{RECYCLE_VARIABLE}={self.recycle_interval_s!r}"

    def unsplit(self) -> str:
        """Why no ``--size`` replays these pools (for ``budget_mb`` None)."""
        return (
            f"no whole-MiB budget splits into {self.workers} {self.transport} pool(s) of {self.memory_size:,} B "
            "each (the pools were not made from SGLANG_MM_FEATURE_CACHE_MB)"
        )

    def unplaced(self, data_start: int, made: int) -> str:
        """Why no flags replay these pools whose data starts at ``data_start``, where the engine's start at ``made``."""
        consumers = f"{self.consumers} consumer{'s' if self.consumers != 1 else ''}"
        return (
            f"their data starts at {data_start:,} B, where SGLang's pools of {consumers} start theirs at {made:,} B "
            "(the pools were not laid out by SGLang)"
        )


def of_pools(pools: list[dict[str, Any]], granularity: int = DEFAULT_GRANULARITY) -> RecordedLayout:
    """The layout of a recording's pool manifests (in worker order; the first pool's layout stands for all)."""
    first = pools[0]
    try:
        memory_size, consumers = int(first["layout"]["memory_size"]), int(first["layout"]["consumers"])
        interval = float(first["recycle_interval_s"])
    except (KeyError, TypeError, ValueError) as e:
        raise TraceError(f"{first.get('file')}: the manifest's layout is not a pool's ({e!r})") from None
    transport = str(first["transport"])
    return RecordedLayout(
        workers=len(pools),
        memory_size=memory_size,
        consumers=consumers,
        transport=transport,
        recycle_interval_s=interval,
        budget_mb=budget_mb(memory_size, len(pools), transport, granularity),
    )
