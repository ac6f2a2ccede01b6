"""The finding-code registries: the tables of docs/findings.md list exactly their codes, and findings are made from them."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from mmpool_cli.core import codes
from mmpool_cli.core.findings import Finding, Severity
from mmpool_cli.engines import engine, names
from mmpool_cli.probe.codes import PROBE

ROOT = Path(__file__).resolve().parents[2]
FINDINGS = "docs/findings.md"  # where the code tables live; the README links to it
ROW = re.compile(r"^\| ((?:`[a-z0-9.-]+`(?:, )?)+) \| ([a-z, ()0-9.]+?) \| .* \|$")


def table_codes(page: str = FINDINGS) -> dict[str, tuple[str, ...]]:
    """Every code in the page's finding-code tables, with its severities (the usual one first)."""
    found: dict[str, tuple[str, ...]] = {}
    heading = ""
    for line in (ROOT / page).read_text(encoding="utf-8").splitlines():
        if line.startswith("#"):
            heading = line
        m = ROW.match(line)
        if not m or "Finding codes" not in heading:
            continue
        names_ = re.findall(r"`([a-z0-9.-]+)`", m[1])
        usual, _, also = m[2].partition("(")
        severities = [s.strip() for s in usual.split(",")]
        if len(severities) == 1:
            severities *= len(names_)
        assert len(severities) == len(names_), line
        extra = tuple(re.findall(r"(error|warning|info) ", also))
        for name, severity in zip(names_, severities, strict=True):
            assert found.get(name, (severity, *extra)) == (severity, *extra), f"{name} twice with two severities"
            found[name] = (severity, *extra)
    return found


def registered() -> dict[str, tuple[str, ...]]:
    for name in names():
        engine(name)  # an engine's registry joins codes.ALL when it is imported
    assert PROBE.owner == "probe"
    return {c.code: tuple(s.value for s in c.severities) for c in codes.ALL.values()}


def test_docs_findings_lists_every_registered_code_and_no_other() -> None:
    listed, registry = table_codes(), registered()
    assert sorted(set(registry) - set(listed)) == [], f"registered but in no table of {FINDINGS}: add a row there"
    assert sorted(set(listed) - set(registry)) == [], f"in a table of {FINDINGS} but in no registry"
    assert {c: s for c, s in listed.items() if registry[c] != s} == {}, f"a severity in {FINDINGS} differs"


def test_the_readme_holds_no_code_table() -> None:
    # the reference moved to docs/: a row added to the README's old tables belongs in FINDINGS
    # (a code-table row anywhere in it, whatever the heading above it)
    lines = (ROOT / "README.md").read_text(encoding="utf-8").splitlines()
    rows = [
        line for line in lines if ROW.match(line) and re.match(r"(error|warning|info)\b", line.split("|")[2].strip())
    ]
    assert rows == [], f"README.md holds finding-code rows {rows}: move them to the tables of {FINDINGS}"


def test_every_code_written_in_the_source_is_registered_with_its_severity() -> None:
    registry = registered()
    wrong = []
    for path in sorted((ROOT / "mmpool_cli").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(node, ast.Call) or len(node.args) < 2:
                continue
            severity, code = node.args[0], node.args[1]
            # a severity chosen at run time (`Severity.info if ok else Severity.warning`): both branches
            choices = [severity.body, severity.orelse] if isinstance(severity, ast.IfExp) else [severity]
            for choice in choices:
                is_severity = isinstance(choice, ast.Attribute) and ast.unparse(choice.value) == "Severity"
                if is_severity and isinstance(code, ast.Constant) and isinstance(code.value, str):
                    assert isinstance(choice, ast.Attribute)
                    if choice.attr not in registry.get(code.value, ()):
                        wrong.append(f"{path.relative_to(ROOT)}:{node.lineno}: {code.value} ({choice.attr})")
    assert wrong == []


def test_a_finding_with_an_unknown_code_or_severity_is_refused() -> None:
    registered()
    assert Finding(Severity.error, "file-missing", "no such file").code == "file-missing"
    with pytest.raises(ValueError, match="in no registry"):
        Finding(Severity.error, "no-such-code", "x")
    with pytest.raises(ValueError, match="never has severity info"):
        Finding(Severity.info, "file-missing", "x")


def test_a_code_belongs_to_one_registry() -> None:
    with pytest.raises(ValueError, match="registered twice"):
        codes.CodeRegistry("again", [codes.Code("file-missing", Severity.error, "x")])
