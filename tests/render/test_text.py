"""The plain-text renderers: JSON payloads, the summary line, --quiet lines and GitHub annotations."""

from __future__ import annotations

import json

import pytest

from mmpool_cli.core.findings import Finding, Severity
from mmpool_cli.core.reports import FileResult, Report
from mmpool_cli.render import text

BAD = Finding(Severity.error, "yaml-syntax", "cannot read: 100% bad\nsecond line", "a.yaml:3:5")
NOTE = Finding(Severity.info, "budget-default", "SGLANG_MM_FEATURE_CACHE_MB is not set", "environment")
WARN = Finding(Severity.warning, "encoder-only-cpu", "cpu it is", "argv[4]")


def report(strict: bool = False) -> Report:
    return Report(
        command="validate",
        results=[
            FileResult(path="environment", kind="environment", findings=[NOTE]),
            FileResult(path="a.yaml", kind="sglang", findings=[BAD]),
            FileResult(path="launch command", kind="launch", findings=[WARN]),
        ],
        strict=strict,
        sglang_version="0.5.20",
        sglang_version_chosen="--sglang-version",
    )


def test_report_data_is_the_versioned_payload() -> None:
    data = json.loads(text.to_json(text.report_data(report(), launch=["sglang", "serve"])))
    assert list(data) == [
        "schema_version", "command", "status", "strict", "sglang_version", "sglang_version_chosen", "launch",
        "files", "summary",
    ]  # fmt: skip
    assert data["status"] == "fail"
    assert [f["status"] for f in data["files"]] == ["valid", "invalid", "valid"]
    assert data["files"][1]["findings"] == [
        {"severity": "error", "code": "yaml-syntax", "message": BAD.message, "location": "a.yaml:3:5"}
    ]
    assert data["summary"] == {"inputs": 3, "valid": 2, "invalid": 1, "errors": 1, "warnings": 1, "infos": 1}


def test_the_summary_line_states_the_summary() -> None:
    assert text.summary_line(report()) == "3 inputs: 2 valid, 1 invalid (1 error, 1 warning, 1 info)"
    assert text.summary_line(report(strict=True)).endswith(
        "invalid (1 error, 1 warning, 1 info) [--strict: warnings fail]"
    )


def test_quiet_keeps_warnings_and_errors_only() -> None:
    lines = text.report_quiet(report()).splitlines()
    assert lines[0] == "a.yaml:3:5: error [yaml-syntax] cannot read: 100% bad"
    assert lines[-1] == "argv[4]: warning [encoder-only-cpu] cpu it is"
    assert not any("budget-default" in line for line in lines)


@pytest.mark.parametrize(
    ("location", "parts"),
    [("a.yaml:3:5", ("a.yaml", 3, 5)), ("c:\\x:y.yaml:1:2", ("c:\\x:y.yaml", 1, 2)), ("argv[3]", (None, None, None)),
     (None, (None, None, None)), ("a.yaml", (None, None, None))],
)  # fmt: skip
def test_split_location(location: str | None, parts: tuple) -> None:
    assert text.split_location(location) == parts


def test_github_annotations_escape_and_end_with_the_summary() -> None:
    lines = text.report_github(report()).splitlines()
    assert lines[0] == "::notice title=mmpool budget-default::SGLANG_MM_FEATURE_CACHE_MB is not set"
    assert (
        lines[1] == "::error file=a.yaml,line=3,col=5,title=mmpool yaml-syntax::cannot read: 100%25 bad%0Asecond line"
    )
    assert lines[2] == "::warning title=mmpool encoder-only-cpu::argv[4]: cpu it is"
    assert lines[-1] == (
        "::notice title=mmpool validate::FAIL: 3 inputs: 2 valid, 1 invalid (1 error, 1 warning, 1 info); "
        "SGLang 0.5.20 (from --sglang-version)"
    )
