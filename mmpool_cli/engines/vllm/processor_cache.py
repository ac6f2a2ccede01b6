"""vLLM's multimodal processor cache in host RAM, as vLLM 0.30-0.34 lay it out.

The API processes are ``--api-server-count``, else 1 with external (``--data-parallel-external-lb``
or ``--data-parallel-rank``) or multi-port balancing, ``--data-parallel-size-local`` with hybrid
balancing and the DP size otherwise (``entrypoints/cli/serve.py:78-129``; 0 with ``--headless``).
The layout (``multimodal/cache/factories.py:23-46``): none when the budget is 0; the chosen
``lru`` or ``shm`` only with one API process and DP 1 or external balancing (hybrid balancing with
one local rank becomes external, ``engine/arg_utils.py:2519-2534``); ``processor_only`` otherwise.

Bytes, each an upper bound on what the cache can hold (``cache/base.py:172-182``, capacity
``GiB_bytes * gb`` compared with items' tensor ``nbytes``):

- ``lru``: up to the budget in the engine core (``LruKeyReplicatedReceiverCache``); the API
  process keeps only sizes (``cache/lru.py``).
- ``processor_only``: up to the budget in each API process.
- ``shm``: one ring buffer of ``int(gb * 2**30)`` bytes plus its 32-byte handle-signing secret
  (0.32 and later) in ``/dev/shm`` (``cache/shm.py``, ``shm_object_storage.py``), objects at most
  ``--mm-shm-cache-max-object-size-mb``.
- in every layout, each API process's render-only cache of the full budget
  (``renderers/base.py:202``), filled only by endpoints that skip the main cache.

vLLM's own docstring (``config/multimodal.py:359-363``) says gb × (api_server_count + DP); the
factory above is what runs. Pure core: standard library only.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Layout = Literal["lru", "processor_only", "shm", "disabled"]
MiB = 1 << 20


@dataclass(frozen=True)
class DataParallel:
    """The data-parallel and API-server flags of one ``vllm serve`` launch."""

    size: int = 1
    size_local: int | None = None
    rank: int | None = None
    start_rank: int | None = None
    external_lb: bool = False
    hybrid_lb: bool = False
    multi_port: bool = False
    api_server_count: int | None = None
    headless: bool = False

    @property
    def external(self) -> bool:
        """External balancing as the serve command detects it: the flag or a DP rank."""
        return self.external_lb or self.rank is not None

    @property
    def hybrid(self) -> bool:
        """Hybrid balancing as the serve command detects it: the flag or a DP start rank."""
        if not self.hybrid_lb and not self.multi_port:
            return self.start_rank is not None
        return self.hybrid_lb

    @property
    def external_after_engine_args(self) -> bool:
        """External balancing as the engine config ends up with it (``parallel_config.data_parallel_external_lb``):
        hybrid balancing with one local rank switches to external."""
        if self.external:
            return True
        hybrid = self.hybrid_lb or (self.start_rank is not None and not self.headless)
        return self.size_local == 1 and hybrid


def api_processes(dp: DataParallel) -> int:
    """How many API server processes ``vllm serve`` starts (``serve.py``'s defaulting).

    >>> api_processes(DataParallel(size=4)), api_processes(DataParallel(size=4, rank=0))
    (4, 1)
    """
    if dp.api_server_count is not None:
        return dp.api_server_count
    if dp.headless:
        return 0
    if dp.multi_port or dp.external:
        return 1
    if dp.hybrid:
        return dp.size_local or 1
    return dp.size


@dataclass(frozen=True)
class ProcessorCache:
    """Where the processor cache lives and what it can take. Field order is the JSON order."""

    layout: Layout
    requested_type: Literal["lru", "shm"]
    api_processes: int
    cache_bytes: int  # one cache's capacity, int(GiB_bytes * gb) (items up to it are cached)
    engine_core_bytes: int  # the engine core's receiver cache (lru)
    api_process_bytes: int  # each API process: its main cache (processor_only) plus the render-only cache
    shm_bytes: int  # the /dev/shm segment (shm)
    host_bytes: int  # everything above on this host: the upper bound of the RAM it can take
    shm_max_object_bytes: int | None


def plan(
    cache_bytes: int,
    cache_type: Literal["lru", "shm"],
    dp: DataParallel,
    *,
    shm_extra_bytes: int = 32,
    shm_max_object_mb: int = 128,
) -> ProcessorCache:
    """The processor cache of a launch whose budget is ``cache_bytes`` (``int(gb * 2**30)``).

    >>> c = plan(4 << 30, "lru", DataParallel(size=4))
    >>> c.layout, c.api_processes, c.host_bytes == 8 * (4 << 30)
    ('processor_only', 4, True)
    """
    processes = api_processes(dp)
    if cache_bytes <= 0:
        return ProcessorCache("disabled", cache_type, processes, 0, 0, 0, 0, 0, None)
    ipc = max(1, processes) == 1 and (dp.size == 1 or dp.external_after_engine_args)
    layout: Layout = cache_type if ipc else "processor_only"
    engine = cache_bytes if layout == "lru" else 0
    per_api = cache_bytes * (2 if layout == "processor_only" else 1)
    shm = cache_bytes + shm_extra_bytes if layout == "shm" else 0
    host = engine + processes * per_api + shm
    max_object = shm_max_object_mb * MiB if layout == "shm" else None
    return ProcessorCache(layout, cache_type, processes, cache_bytes, engine, per_api, shm, host, max_object)
