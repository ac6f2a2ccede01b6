"""The requests a traffic reader finds, the findings it makes, and the summary of one conversion.

Pure core: standard library only.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

from mmpool_cli.core.words import count, counted
from mmpool_cli.errors import MmpoolError
from mmpool_cli.inputs.traffic.prompts import Prompt, Timed
from mmpool_cli.inputs.traffic.writer import Lease
from mmpool_cli.workload.families import Family
from mmpool_cli.workload.items import Video

NS_PER_S = 10**9
MAX_FINDINGS_SHOWN = 10


class TrafficError(MmpoolError):
    """Traffic that cannot be turned into a trace as it stands (exit 2); the message is located.

    ``findings`` are the located findings behind it (with their codes), for formats that carry them.
    """

    def __init__(self, message: str, findings: list[Finding] | None = None) -> None:
        super().__init__(message)
        self.findings = list(findings or [])


@dataclass
class ItemRef:
    """One media item of a request as its source names it."""

    kind: str  # "image", "video" or "audio"
    ref: str  # a URL, a path, a data: URL or base64 (its start, when ``tail`` is set)
    tail: str | None = None  # the end of a string the log cut in the middle
    fields: dict[str, Any] = field(default_factory=dict)  # per-item fields that may change its size


@dataclass
class Request:
    """One request: when the server received it, where it was found, and its items."""

    rid: str
    t_ns: int  # receipt, in nanoseconds on the source's own clock
    where: str  # FILE:LINE
    items: list[ItemRef]
    warmup: bool = False
    finish_ns: int | None = None  # the request's Finish, same clock
    queue_ns: int | None = None  # ReqTimeStats' queue_duration
    coarse: bool = False  # its time is to the second only (e.g. an engine's text request log)
    prompt: Prompt | None = None  # its text as the prefix cache sees it, where the source carries it


@dataclass(frozen=True)
class Finding:
    """Something about one input line: an error stops the conversion, a warning is reported."""

    where: str
    severity: str  # "error" or "warning"
    code: str
    message: str

    def __post_init__(self) -> None:
        from mmpool_cli.core.codes import check
        from mmpool_cli.core.findings import Severity

        check(self.code, Severity(self.severity))  # an unregistered code is a bug in mmpool

    def line(self) -> str:
        """``where: severity [code] message``, as validate and check print a finding (JSON has the same code)."""
        return f"{self.where}: {self.severity} [{self.code}] {self.message}"


@dataclass
class Summary:
    """What a conversion read and decided: counts, skipped lines and why, lifetimes, findings."""

    source: str  # the input format
    files: list[str]
    requests: int = 0
    items: int = 0
    allocs: int = 0
    bytes: int = 0
    warmup: int = 0
    skipped: Counter[str] = field(default_factory=Counter)  # reason -> lines
    lifetimes: Counter[str] = field(default_factory=Counter)  # rule -> requests
    failing: int = 0  # requests the engine itself would fail (not pooled)
    engine: str = "the server"  # how messages name the engine that served the traffic
    ignored_fields: Counter[str] = field(default_factory=Counter)
    decoders: Counter[str] = field(default_factory=Counter)
    notes: list[str] = field(default_factory=list)
    findings: list[Finding] = field(default_factory=list)
    duration_ns: int = 0

    def add(self, finding: Finding) -> None:
        self.findings.append(finding)

    @property
    def errors(self) -> list[Finding]:
        return [f for f in self.findings if f.severity == "error"]

    def raise_errors(self) -> None:
        """Raise TrafficError naming the first located errors and how many there are."""
        errors = self.errors
        if not errors:
            return
        shown = [f.line() for f in errors[:MAX_FINDINGS_SHOWN]]
        more = len(errors) - len(shown)
        tail = f"\n... and {more} more" if more else ""
        count = f" ({len(errors)} items or lines could not be used)" if len(errors) > 1 else ""
        raise TrafficError("\n".join(shown) + tail + count, self.findings)

    def unusable(self, what: str) -> TrafficError:
        """The error for traffic with nothing to size: ``what`` was found, then each line's reason."""
        if not self.findings:
            return TrafficError(f"{', '.join(self.files)}: {what}; nothing to size (see 'mmpool trace --help')")
        shown = [f"  {f.line()}" for f in self.findings[:MAX_FINDINGS_SHOWN]]
        if len(self.findings) > MAX_FINDINGS_SHOWN:
            shown.append(f"  ... and {len(self.findings) - MAX_FINDINGS_SHOWN} more")
        message = "\n".join([f"{', '.join(self.files)}: {what}; nothing to size", *shown])
        return TrafficError(message + "\nsee 'mmpool trace --help'", self.findings)

    def to_data(self) -> dict[str, Any]:
        """The summary as JSON-safe data."""
        return {
            "source": self.source,
            "files": self.files,
            "requests": self.requests,
            "items": self.items,
            "allocs": self.allocs,
            "bytes": self.bytes,
            "warmup_requests_skipped": self.warmup,
            "requests_engine_would_fail": self.failing,
            "lines_skipped": dict(sorted(self.skipped.items())),
            "lifetimes": dict(sorted(self.lifetimes.items())),
            "decoders": dict(sorted(self.decoders.items())),
            "ignored_fields": dict(sorted(self.ignored_fields.items())),
            "duration_ns": self.duration_ns,
            "notes": self.notes,
            "findings": [
                {"where": f.where, "severity": f.severity, "code": f.code, "message": f.message} for f in self.findings
            ],
        }

    def text(self) -> str:
        """The summary for a terminal (stderr): a few lines, numbers whole."""
        lines = [
            f"mmpool trace: {count(self.requests, 'request')}, {count(self.items, 'item')}, "
            f"{count(self.allocs, 'alloc')}, "
            f"{self.bytes:,} B from {', '.join(self.files)} ({self.source})"
        ]
        if self.warmup:
            lines.append(f"  skipped {self.engine}'s warm-up request ({self.warmup})")
        if self.skipped:
            parts = ", ".join(counted(n, reason) for reason, n in sorted(self.skipped.items()))
            lines.append(f"  lines skipped: {parts}")
        if self.lifetimes:
            parts = ", ".join(counted(n, rule) for rule, n in sorted(self.lifetimes.items()))
            lines.append(f"  lease lifetimes: {parts}")
        if self.decoders:
            parts = ", ".join(counted(n, d) for d, n in sorted(self.decoders.items()))
            lines.append(f"  images decoded by: {parts}")
        if self.failing:
            lines.append(f"  {count(self.failing, 'request')} {self.engine} would fail (not pooled; see the warnings)")
        if self.ignored_fields:
            parts = ", ".join(f"{name} ({n})" for name, n in sorted(self.ignored_fields.items()))
            lines.append(f"  per-item fields this family does not use (ignored): {parts}")
        lines.extend(f"  note: {n}" for n in self.notes)
        warnings = [f for f in self.findings if f.severity == "warning"]
        lines.extend(f"  {f.line()}" for f in warnings[:MAX_FINDINGS_SHOWN])
        if len(warnings) > MAX_FINDINGS_SHOWN:
            lines.append(f"  ... and {len(warnings) - MAX_FINDINGS_SHOWN} more warnings")
        return "\n".join(lines)


@dataclass(frozen=True)
class TrafficRequest:
    """What traffic to read, and how the server that served it was set up."""

    family: Family
    settings: dict[str, Any]
    source: str  # "auto", "sglang-log", "openai" or "bench-serving"
    inputs: list[str]  # files, or bench_serving's arguments
    workers: int = 1
    tp_size: int = 1
    dp_encoder: bool = False
    recv_delay_ns: int | None = None  # None: the engine's stated default (one scheduler step)
    hold_ns: int | None = None
    assume_image: tuple[int, int] | None = None
    assume_video: Video | None = None  # what http(s) video URLs are taken to be (never fetched)
    request_time_ns: int = NS_PER_S  # bench_serving with --max-concurrency
    environ: Mapping[str, str] = field(default_factory=dict)


@dataclass
class Conversion:
    """Traffic converted: one lease per pooled tensor, each alloc id's item, and what was read."""

    leases: list[Lease]
    items: dict[object, str]  # alloc id -> its item ("image 1920x1080")
    summary: Summary
    keys: dict[object, str] = field(default_factory=dict)  # alloc id -> its item's content key, where known
    # each request of the leases (its trace id, as ``REQUEST/N`` names it) -> its prompt and times, in order
    prompts: dict[str, Timed] = field(default_factory=dict)


_A = TypeVar("_A")
_R = TypeVar("_R")


class FileMap(Protocol):
    """How a conversion reads its files: ``fn`` over ``items``, the results in ``items``' order
    (one after another here, or in parallel elsewhere: the order of the results is what counts)."""

    def __call__(self, fn: Callable[[_A], _R], items: Sequence[_A], /) -> Iterable[_R]: ...
