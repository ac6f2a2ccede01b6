"""Text output shared by every command, without rich: JSON, and GitHub workflow annotations.

Kept apart from the rich renderers so that ``--format json`` and ``--format github`` never load rich.
"""

from __future__ import annotations

import json
from typing import Any

from mmpool_cli.core.findings import Finding, Severity
from mmpool_cli.core.reports import FileResult, Report
from mmpool_cli.engines.sglang.versions import how_chosen


def to_json(data: Any) -> str:
    """JSON text for a payload (a result's ``to_data()`` or plain data), integers kept exact."""
    if hasattr(data, "to_data"):
        data = data.to_data()
    return json.dumps(data, indent=2, ensure_ascii=False)


def report_data(report: Report, launch: list[str] | None = None) -> dict[str, Any]:
    """The versioned JSON payload of ``validate``/``check`` (``Report.to_data``)."""
    return report.to_data(launch)


def summary_line(report: Report) -> str:
    """``3 inputs: 2 valid, 1 invalid (3 errors, 1 warning)``: the JSON summary's numbers, in words.

    The environment is an input like each file (and the launch command), as in ``summary``.
    """
    c = report.counts()

    def count(n: int, noun: str) -> str:
        return f"{n} {noun}{'' if n == 1 else 's'}"

    counted = [count(c[f"{name}s"], name) for name in ("error", "warning", "info") if c[f"{name}s"]]
    text = f"{count(c['inputs'], 'input')}: {c['valid']} valid, {c['invalid']} invalid"
    text += f" ({', '.join(counted)})" if counted else ""
    return text + (" [--strict: warnings fail]" if report.strict and c["warnings"] else "")


def report_quiet(report: Report) -> str:
    """Only the warning and error lines, ``where: severity [code] message``, as ``--quiet`` prints them."""
    lines = []
    for result in report.results:
        for f in result.findings:
            if f.severity is not Severity.info:
                where = f"{f.location}: " if f.location else f"{result.path}: "
                lines.append(f"{where}{f.severity.value} [{f.code}] {f.message}")
    return "\n".join(lines)


def version_note(version: str, chosen: str, engine: str = "sglang") -> str:
    """Which release's rules a result follows, and why: ``SGLang 0.5.20 (from --sglang-version)``."""
    if engine == "vllm":
        from mmpool_cli.engines.vllm.versions import how_chosen as vllm_how_chosen

        return f"vLLM {version} ({vllm_how_chosen(chosen)})"
    return f"SGLang {version} ({how_chosen(chosen)})"


_LEVEL = {Severity.error: "error", Severity.warning: "warning", Severity.info: "notice"}


def _escape_data(text: str) -> str:
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def _escape_property(text: str) -> str:
    return _escape_data(text).replace(":", "%3A").replace(",", "%2C")


def split_location(location: str | None) -> tuple[str | None, int | None, int | None]:
    """``file:line:col`` → its parts; a location that is not in a file gives ``(None, None, None)``."""
    if not location:
        return None, None, None
    head, _, col = location.rpartition(":")
    path, _, line = head.rpartition(":")
    if path and line.isdigit() and col.isdigit():
        return path, int(line), int(col)
    return None, None, None


def github_annotation(result: FileResult, f: Finding) -> str:
    """One finding as a GitHub workflow command: ``::error file=F,line=L,col=C,title=CODE::message``."""
    path, line, col = split_location(f.location)
    props = []
    if path is not None:
        props += [f"file={_escape_property(path)}", f"line={line}", f"col={col}"]
    elif result.kind in ("mmpool", "sglang", "unknown"):
        props.append(f"file={_escape_property(result.path)}")
    props.append(f"title={_escape_property(f'mmpool {f.code}')}")
    where = f"{f.location}: " if path is None and f.location and f.location != result.path else ""
    return f"::{_LEVEL[f.severity]} {','.join(props)}::{_escape_data(where + f.message)}"


def report_github(report: Report) -> str:
    """Every finding as a GitHub annotation, then the summary as one more: nothing but annotations."""
    lines = [github_annotation(r, f) for r in report.results for f in r.findings]
    release = version_note(report.sglang_version, report.sglang_version_chosen, report.engine)
    verdict = "OK" if report.ok else "FAIL"
    title = _escape_property(f"mmpool {report.command}")
    lines.append(f"::notice title={title}::{_escape_data(f'{verdict}: {summary_line(report)}; {release}')}")
    return "\n".join(lines)
