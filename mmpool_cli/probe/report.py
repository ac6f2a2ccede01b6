"""What the probe found: per-stage figures and findings. Pure dataclasses, no torch."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Literal

from mmpool_cli.core.models import Finding, Plan, Severity, to_data

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
    """The whole probe: the plan it checked, the GPUs, and every stage."""

    plan: Plan
    gpus: list[GpuInfo]
    base_gpu: GpuInfo | None
    stages: list[Stage]
    seconds: float
    schema_version: int = PROBE_SCHEMA_VERSION

    @property
    def status(self) -> Literal["ok", "fail"]:
        """``fail`` when any stage failed or the plan has an error."""
        failed = self.plan.status == "fail" or any(s.status == "fail" for s in self.stages)
        return "fail" if failed else "ok"

    @property
    def findings(self) -> list[Finding]:
        """Every stage's findings, in stage order."""
        return [f for s in self.stages for f in s.findings]

    def to_data(self) -> dict[str, Any]:
        """The JSON payload."""
        return {
            "schema_version": self.schema_version,
            "status": self.status,
            "seconds": round(self.seconds, 3),
            "base_gpu": None if self.base_gpu is None else dataclasses.asdict(self.base_gpu),
            "gpus": [dataclasses.asdict(g) for g in self.gpus],
            "stages": [to_data(s) for s in self.stages],
            "plan": self.plan.to_data(),
        }
