"""A validate/check report as SARIF 2.1.0, for code-scanning views that show findings inline.

Each finding code is a rule; each finding a result at its file, line and column (a finding on
the environment or a launch command is a result without a location, its place named in the
message). Kept free of rich.
"""

from __future__ import annotations

import json
from pathlib import PurePosixPath
from typing import Any

from mmpool_cli import __version__
from mmpool_cli.core.findings import Finding, Severity
from mmpool_cli.core.reports import FileResult, Report
from mmpool_cli.render.text import split_location

SARIF_SCHEMA = "https://docs.oasis-open.org/sarif/sarif/v2.1.0/errata01/os/schemas/sarif-schema-2.1.0.json"
_LEVEL = {Severity.error: "error", Severity.warning: "warning", Severity.info: "note"}


def _uri(path: str) -> str:
    """A relative path as a URI reference (``%`` and spaces escaped), as SARIF viewers resolve it."""
    from urllib.parse import quote

    return quote(PurePosixPath(path).as_posix(), safe="/")


def _result(result: FileResult, f: Finding, rule_index: int) -> dict[str, Any]:
    path, line, col = split_location(f.location)
    if path is None and result.kind in ("mmpool", "sglang", "unknown"):
        path = result.path
    where = f"{f.location}: " if path is None and f.location else ""
    out: dict[str, Any] = {
        "ruleId": f.code,
        "ruleIndex": rule_index,
        "level": _LEVEL[f.severity],
        "message": {"text": where + f.message},
    }
    if path is not None:
        physical: dict[str, Any] = {"artifactLocation": {"uri": _uri(path)}}
        if line is not None:
            physical["region"] = {"startLine": line, "startColumn": col}
        out["locations"] = [{"physicalLocation": physical}]
    return out


def report_sarif(report: Report) -> str:
    """The report as one SARIF 2.1.0 log with one run."""
    codes = sorted({f.code for r in report.results for f in r.findings})
    index = {code: i for i, code in enumerate(codes)}
    rules = [{"id": code, "name": code, "shortDescription": {"text": code}} for code in codes]
    results = [_result(r, f, index[f.code]) for r in report.results for f in r.findings]
    log = {
        "$schema": SARIF_SCHEMA,
        "version": "2.1.0",
        "runs": [
            {
                "tool": {"driver": {"name": "mmpool", "version": __version__, "rules": rules}},
                "results": results,
                "invocations": [{"executionSuccessful": True, "exitCode": 0 if report.ok else 1}],
                # the engine release whose rules the findings follow
                "properties": {
                    f"{report.engine}Version": report.sglang_version,
                    f"{report.engine}VersionChosen": report.sglang_version_chosen,
                },
            }
        ],
    }
    return json.dumps(log, ensure_ascii=False)
