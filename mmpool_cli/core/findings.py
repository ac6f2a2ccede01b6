"""Findings: what mmpool found about an input, with a stable code and a severity.

Neutral core: knows no engine; standard library only.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from mmpool_cli.core import codes
from mmpool_cli.core.codes import Severity

__all__ = ["Finding", "Note", "Severity", "to_data"]


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

    def __post_init__(self) -> None:
        codes.check(self.code, self.severity)

    def at(self, location: str | None) -> Finding:
        """This finding located at ``location``, unless it is located already or there is none."""
        if self.location or location is None:
            return self
        return Finding(self.severity, self.code, self.message, location, self.subject)


@dataclass(frozen=True)
class Note:
    """A finding of a report about traffic (``cache``, ``tune``): a registered code (docs/findings.md), its
    severity, the message."""

    code: str
    severity: str  # "warning" or "info"
    message: str

    def __post_init__(self) -> None:
        codes.check(self.code, Severity(self.severity))  # an unregistered code is a bug in mmpool
