"""What vLLM's parser makes of a launch: its words, located, and the settings and findings they give.

Every word keeps where it came from (``argv[N]`` or ``file:line:col``), so each setting and each
finding points at what the user wrote. Pure core: standard library only.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from mmpool_cli.core.findings import Finding, Severity
from mmpool_cli.engines.vllm.flags import FlagTable, table


@dataclass(frozen=True)
class Token:
    """One word and where it came from."""

    text: str
    origin: str


@dataclass(frozen=True)
class Setting:
    """A flag's value after parsing, and where the winning occurrence was written."""

    value: Any
    origin: str


@dataclass
class Reading:
    """What vLLM's parser makes of the launch, for the interpreted flags, plus every problem."""

    flags: FlagTable = field(default_factory=table)
    settings: dict[str, Setting] = field(default_factory=dict)
    findings: list[Finding] = field(default_factory=list)
    config_path: str | None = None

    def get(self, dest: str, default: Any = None) -> Any:
        setting = self.settings.get(dest)
        return default if setting is None else setting.value

    def origin(self, dest: str) -> str | None:
        setting = self.settings.get(dest)
        return None if setting is None else setting.origin

    def add(self, severity: Severity, code: str, message: str, location: str | None) -> None:
        self.findings.append(Finding(severity, code, message, location))
