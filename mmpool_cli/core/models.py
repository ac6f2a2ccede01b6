"""Result and request models of the core: frozen dataclasses, cheap to import.

Pure core: no typer, rich or torch, and no pydantic either, so ``mmpool plan`` starts fast;
pydantic validates config files (``mmpool_cli.inputs.config``). Sizes are integers of bytes
everywhere; a number that cannot be computed is None (``null`` in JSON), never a made-up 0.
"""

from __future__ import annotations

import dataclasses
import re
import shlex
from dataclasses import dataclass, field
from enum import StrEnum
from typing import TYPE_CHECKING, Any, Literal

from mmpool_cli.sglang.rules import DEFAULT_VMM_GRANULARITY
from mmpool_cli.sglang.versions import NEWEST

if TYPE_CHECKING:
    from mmpool_cli.workload.features import Workload
    from mmpool_cli.workload.kv import KvCost, KvRequest

PLAN_SCHEMA_VERSION = 1

Transport = Literal["cuda_ipc", "cuda_vmm"]


def to_data(obj: Any) -> Any:
    """A dataclass result as plain JSON-ready data (dicts, lists, str, int, bool, None).

    Fields whose metadata says ``json: False`` stay out of the payload.
    """
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {f.name: to_data(getattr(obj, f.name)) for f in dataclasses.fields(obj) if f.metadata.get("json", True)}
    if isinstance(obj, list | tuple):
        return [to_data(v) for v in obj]
    if isinstance(obj, dict):
        return {k: to_data(v) for k, v in obj.items()}
    return obj


class Severity(StrEnum):
    """How much a finding matters: errors fail a run, warnings only under ``--strict``."""

    error = "error"
    warning = "warning"
    info = "info"


@dataclass(frozen=True)
class Finding:
    """One thing mmpool found, with a stable ``code`` scripts can match on.

    ``subject`` names the input the finding is about (a ``PlanRequest`` field such as ``workers``,
    or ``env`` for an environment variable), so that each front end can point at the flag, key or
    variable that sets it; it is not part of the JSON payload, ``location`` is.
    """

    severity: Severity
    code: str
    message: str
    location: str | None = None
    subject: str | None = field(default=None, compare=False, metadata={"json": False})

    def at(self, location: str | None) -> Finding:
        """This finding located at ``location``, unless it is located already or there is none."""
        if self.location or location is None:
            return self
        return Finding(self.severity, self.code, self.message, location, self.subject)


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
class PlanRequest:
    """Everything ``make_plan`` needs; the CLI and config files build one of these."""

    budget: Budget
    workers: int = 1
    tp_size: int = 1
    dp_size: int = 1
    attn_dp_size: int = 1
    enable_dp_attention: bool = False
    transport: Transport = "cuda_ipc"
    vmm_granularity: int = DEFAULT_VMM_GRANULARITY
    feature_sizes: tuple[int, ...] = ()
    base_gpu_id: int = 0
    expandable_segments: bool = False
    context_bytes: int | None = None
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
class Settings:
    """What to copy into the launch: environment variables and SGLang flags."""

    env: dict[str, str]
    args: list[str]
    # the model directory or hub id to launch (--model-path), None when only a family was given
    model_path: str | None = None

    def launch_line(self) -> str:
        """``sglang serve --model-path ...`` with the flags, quoted for a shell; MODEL where the model is unknown."""
        path = "MODEL" if self.model_path is None else shlex.quote(self.model_path)
        return " ".join(["sglang serve --model-path", path, *(shlex.quote(a) for a in self.args)])


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


ResultKind = Literal["mmpool", "sglang", "environment", "launch", "unknown"]
REPORT_SCHEMA_VERSION = 1


@dataclass(frozen=True)
class FileResult:
    """One checked input (a file, the environment, a launch command): its findings and plan."""

    path: str
    kind: ResultKind
    findings: list[Finding]
    plan: Plan | None = None
    transport: str | None = None

    def fails(self, strict: bool = False) -> bool:
        """Whether this input fails: an error, or a warning under ``--strict``."""
        failing = (Severity.error, Severity.warning) if strict else (Severity.error,)
        return any(f.severity in failing for f in self.findings)


_FILE_PLACE = re.compile(r"(?P<path>.*):(?P<line>[0-9]+):(?P<col>[0-9]+)")
_ARGV_PLACE = re.compile(r"argv\[(?P<word>[0-9]+)\]")


def _place(finding: Finding) -> tuple[str, int, int]:
    """A finding's sort key: where it is, numbers compared as numbers; unlocated ones first."""
    location = finding.location or ""
    if m := _FILE_PLACE.fullmatch(location):
        return m["path"], int(m["line"]), int(m["col"])
    if m := _ARGV_PLACE.fullmatch(location):
        return "", int(m["word"]), 0
    return location, 0, 0


@dataclass(frozen=True)
class Report:
    """What ``mmpool validate`` or ``mmpool check`` found, for every input, in input order."""

    command: Literal["validate", "check"]
    results: list[FileResult]
    strict: bool = False
    sglang_version: str = NEWEST
    sglang_version_chosen: str = "newest"

    def __post_init__(self) -> None:
        # every format lists each input's findings by place: file, line, column (argv[N] by N)
        ordered = [dataclasses.replace(r, findings=sorted(r.findings, key=_place)) for r in self.results]
        object.__setattr__(self, "results", ordered)

    @property
    def ok(self) -> bool:
        """Whether every input passes (exit code 0)."""
        return not any(r.fails(self.strict) for r in self.results)

    def counts(self) -> dict[str, int]:
        """Inputs, valid and invalid inputs, and findings by severity."""
        findings = [f for r in self.results for f in r.findings]
        invalid = sum(r.fails(self.strict) for r in self.results)
        counts = {"inputs": len(self.results), "valid": len(self.results) - invalid, "invalid": invalid}
        for severity in Severity:
            counts[f"{severity.value}s"] = sum(f.severity is severity for f in findings)
        return counts
