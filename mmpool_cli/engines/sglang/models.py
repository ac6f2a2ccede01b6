"""SGLang's plan request and plan: frozen dataclasses, cheap to import.

No typer, rich or torch, and no pydantic either, so ``mmpool plan`` starts fast;
pydantic validates config files (``mmpool_cli.engines.sglang.mmpool_config``). Sizes are integers of bytes
everywhere; a number that cannot be computed is None (``null`` in JSON), never a made-up 0.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from mmpool_cli.core.findings import Finding, Severity, to_data
from mmpool_cli.core.reports import Settings
from mmpool_cli.engines.sglang.rules import DEFAULT_VMM_GRANULARITY
from mmpool_cli.engines.sglang.versions import NEWEST

if TYPE_CHECKING:
    from mmpool_cli.workload.features import Workload
    from mmpool_cli.workload.kv import KvCost, KvRequest

PLAN_SCHEMA_VERSION = 1

Transport = Literal["cuda_ipc", "cuda_vmm"]


@dataclass(frozen=True)
class Budget:
    """The pool budget and where it came from (a flag, a config file, the environment or SGLang's default)."""

    bytes: int
    source: Literal["flag", "config", "env", "default"]
    variable: str | None = None
    raw: str | None = None
    invalid: bool = False
    shadowed: tuple[str, str] | None = None


@dataclass(frozen=True)
class VlmCache:
    """``SGLANG_VLM_CACHE_SIZE_MB`` as SGLang reads it; a value ``int()`` rejects keeps the default."""

    mb: int
    variable: str | None = None
    raw: str | None = None
    invalid: bool = False

    @property
    def retention(self) -> bool:
        """Whether it is set and keeps a cache (what the Qwen3-VL override looks at)."""
        return self.variable is not None and self.mb > 0


@dataclass(frozen=True)
class PlanRequest:
    """Everything ``make_plan`` needs; the CLI and config files build one of these."""

    budget: Budget
    workers: int = 1
    vlm_cache: VlmCache | None = None  # None: unset (the release's default)
    tp_size: int = 1
    dp_size: int = 1
    attn_dp_size: int = 1
    enable_dp_attention: bool = False
    transport: Transport = "cuda_ipc"
    # False: the user named no transport (plan's default): the plan says what SGLang picks without one,
    # with SGLANG_USE_CUDA_IPC_TRANSPORT as read (None: unset)
    transport_asked: bool = True
    legacy_transport: bool | None = None
    vmm_granularity: int = DEFAULT_VMM_GRANULARITY
    feature_sizes: tuple[int, ...] = ()
    base_gpu_id: int = 0
    expandable_segments: bool = False
    context_bytes: int | None = None
    # SGLang's --nnodes: its positional-embeds transport (and so its second pool) needs one node
    nnodes: int = 1
    workload: Workload | None = None
    kv: KvRequest | None = None
    # The SGLang release whose rules apply, and how it was chosen (versions.choose).
    sglang_version: str = NEWEST
    sglang_version_chosen: str = "newest"


@dataclass(frozen=True)
class FeatureFit:
    """How one feature size sits in one fresh worker pool."""

    bytes: int
    slice_bytes: int
    fit_per_worker: int | None
    fit_per_node: int | None
    limited_by: Literal["bytes", "slots"] | None
    item: str | None = None


@dataclass(frozen=True)
class HbmEstimate:
    """What the pools are predicted to take from the base GPU, beyond the budget's arithmetic.

    ``total_bytes`` is the feature pools and contexts; ``max_total_bytes`` adds the
    positional-embeds pools a release may create later (cuda_vmm from 0.5.22: one cuda_ipc
    ``budget // workers`` pool per worker, on the first request with CUDA embedding overrides),
    so it is the most the tokenizer processes can take.
    """

    base_gpu_id: int
    allocator: Literal["caching", "caching-expandable", "vmm"]
    pool_reserved_bytes_per_worker: int
    pool_reserved_bytes: int
    allocator_overhead_bytes: int
    processes: int
    context_bytes_per_process: int
    context_bytes: int
    total_bytes: int
    positional_pool_bytes_per_worker: int
    positional_pool_bytes: int
    max_total_bytes: int


@dataclass(frozen=True)
class Plan:
    """What SGLang will do with a pool configuration, byte for byte. Field order is the JSON order."""

    status: Literal["ok", "fail"]
    budget_bytes: int
    budget_source: str
    budget_env_variable: str | None
    budget_env_value: str | None
    sglang_mm_feature_cache_mb: int
    effective_budget_bytes: int
    floor_loss_bytes: int
    workers: int
    tp_size: int
    dp_size: int
    attn_dp_size: int
    enable_dp_attention: bool
    transport: Transport
    per_worker_bytes: int | None
    unused_bytes: int | None
    consumers: int | None
    header_bytes: int | None
    lease_control_bytes: int | None
    vmm_granularity_bytes: int | None
    allocation_bytes_per_worker: int | None
    usable_bytes_per_worker: int | None
    max_inflight_slices: int | None
    features: list[FeatureFit]
    hbm: HbmEstimate | None
    settings: Settings | None
    findings: list[Finding]
    schema_version: int = field(default=PLAN_SCHEMA_VERSION)
    sglang_version: str = field(default=NEWEST)
    sglang_version_chosen: str = field(default="newest")
    workload: Workload | None = None
    kv_cost: KvCost | None = None

    @property
    def errors(self) -> list[Finding]:
        """The error-level findings."""
        return [f for f in self.findings if f.severity is Severity.error]

    def to_data(self) -> dict[str, Any]:
        """The JSON payload: ``schema_version`` and ``status`` first, then every field."""
        data: dict[str, Any] = to_data(self)
        head = {"schema_version": data.pop("schema_version"), "status": data.pop("status")}
        head["sglang_version"] = data.pop("sglang_version")
        head["sglang_version_chosen"] = data.pop("sglang_version_chosen")
        return head | data
