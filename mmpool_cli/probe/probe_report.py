"""What the probe found: per-stage figures and findings. Pure dataclasses, no torch."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Literal

from mmpool_cli.core.findings import Finding, Severity, to_data
from mmpool_cli.engines.sglang.models import Plan

PROBE_SCHEMA_VERSION = 1

StageStatus = Literal["pass", "fail", "skip"]


@dataclass(frozen=True)
class GpuInfo:
    """One GPU as NVML sees it, with the CUDA index it has in this process's environment."""

    cuda_index: int | None
    nvml_index: int
    name: str
    uuid: str
    total_bytes: int
    free_bytes: int
    used_bytes: int


@dataclass
class Stage:
    """One probe stage: pass, fail or skip, its figures (sizes in bytes) and its findings."""

    name: str
    title: str
    status: StageStatus = "skip"
    seconds: float | None = None
    figures: dict[str, Any] = field(default_factory=dict)
    findings: list[Finding] = field(default_factory=list)

    def add(self, severity: Severity, code: str, message: str) -> None:
        """Record a finding; an error fails the stage."""
        self.findings.append(Finding(severity=severity, code=code, message=message))
        if severity is Severity.error:
            self.status = "fail"


@dataclass
class ProbeReport:
    """The whole probe: the plan it checked, the GPUs, and every stage.

    A probe that could not start has no stages: ``inputs`` then holds why (a config file's
    findings, or ``probe-unavailable`` when this machine cannot run it), so every format
    reports every outcome in the same shape.
    """

    plan: Plan | None
    gpus: list[GpuInfo]
    base_gpu: GpuInfo | None
    stages: list[Stage]
    seconds: float
    inputs: list[Finding] = field(default_factory=list)
    unavailable: bool = False
    schema_version: int = PROBE_SCHEMA_VERSION

    @property
    def status(self) -> Literal["ok", "fail", "unavailable"]:
        """``unavailable`` when it cannot run here; ``fail`` when an input, the plan or a stage failed."""
        if self.unavailable:
            return "unavailable"
        failed = (
            self.plan is None
            or self.plan.status == "fail"
            or any(f.severity is Severity.error for f in self.inputs)
            or any(s.status == "fail" for s in self.stages)
        )
        return "fail" if failed else "ok"

    @property
    def findings(self) -> list[Finding]:
        """The inputs' findings, then every stage's, in stage order."""
        return self.inputs + [f for s in self.stages for f in s.findings]

    def to_data(self) -> dict[str, Any]:
        """The JSON payload."""
        return {
            "schema_version": self.schema_version,
            "status": self.status,
            "seconds": round(self.seconds, 3),
            "base_gpu": None if self.base_gpu is None else dataclasses.asdict(self.base_gpu),
            "gpus": [dataclasses.asdict(g) for g in self.gpus],
            "stages": [to_data(s) for s in self.stages],
            "plan": None if self.plan is None else self.plan.to_data(),
            "findings": [to_data(f) for f in self.inputs],
        }
