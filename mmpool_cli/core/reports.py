"""The reports of the checking commands: each input's findings and plan, in input order.

Neutral core: knows no engine; an engine's plan enters as anything with a ``to_data``.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from mmpool_cli.core.findings import Finding, Severity, to_data


class PlanResult(Protocol):
    """What a report needs of an engine's plan: its JSON payload."""

    def to_data(self) -> dict[str, Any]: ...


@dataclass(frozen=True)
class Settings:
    """What to copy into the launch: environment variables and SGLang flags."""

    env: dict[str, str]
    args: list[str]
    # the model directory or hub id to launch, None when only a family was given
    model_path: str | None = None


ResultKind = Literal["mmpool", "sglang", "vllm", "environment", "launch", "unknown"]
REPORT_SCHEMA_VERSION = 1


@dataclass(frozen=True)
class FileResult:
    """One checked input (a file, the environment, a launch command): its findings and plan."""

    path: str
    kind: ResultKind
    findings: list[Finding]
    plan: PlanResult | None = None
    transport: str | None = None

    def fails(self, strict: bool = False) -> bool:
        """Whether this input fails: an error, or a warning under ``--strict``."""
        failing = (Severity.error, Severity.warning) if strict else (Severity.error,)
        return any(f.severity in failing for f in self.findings)

    def to_data(self, strict: bool = False) -> dict[str, Any]:
        """This input's part of the report's JSON payload."""
        return {
            "path": self.path,
            "kind": self.kind,
            "status": "invalid" if self.fails(strict) else "valid",
            "transport": self.transport,
            "findings": [to_data(f) for f in self.findings],
            "plan": None if self.plan is None else self.plan.to_data(),
        }


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
    sglang_version: str = dataclasses.field(kw_only=True)
    sglang_version_chosen: str = "newest"
    engine: str = dataclasses.field(default="sglang", kw_only=True)  # whose release the versions are

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

    def to_data(self, launch: list[str] | None = None) -> dict[str, Any]:
        """The versioned JSON payload: every input with its findings and plan, then the summary."""
        data: dict[str, Any] = {
            "schema_version": REPORT_SCHEMA_VERSION,
            "command": self.command,
            "status": "ok" if self.ok else "fail",
            "strict": self.strict,
            "sglang_version": self.sglang_version,
            "sglang_version_chosen": self.sglang_version_chosen,
        }
        if self.engine != "sglang":  # another engine's report names its own release
            del data["sglang_version"], data["sglang_version_chosen"]
            data["engine"] = self.engine
            data[f"{self.engine}_version"] = self.sglang_version
            data[f"{self.engine}_version_chosen"] = self.sglang_version_chosen
        if launch is not None:
            data["launch"] = launch
        data["files"] = [r.to_data(self.strict) for r in self.results]
        data["summary"] = self.counts()
        return data
