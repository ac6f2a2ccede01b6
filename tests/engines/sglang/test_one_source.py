"""Each release's rules have one source: the version table (versions.py and data/releases.json).

No other module of the package spells the release whose rules mmpool applies by default (the
newest) in its code; prose (docstrings) may name the release a rule was read from.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

from mmpool_cli.engines.sglang.versions import NEWEST

PACKAGE = Path(__file__).resolve().parents[3] / "mmpool_cli"
VERSION_TABLE = PACKAGE / "engines" / "sglang" / "versions.py"
RELEASE = re.compile(rf"(?<![\d.]){re.escape(NEWEST)}(?![\d])")


def _code_strings(tree: ast.AST) -> list[ast.Constant]:
    docstrings = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
        and node.body
        and isinstance(node.body[0], ast.Expr)
        and isinstance(node.body[0].value, ast.Constant)
    }
    return [
        n
        for n in ast.walk(tree)
        if isinstance(n, ast.Constant) and isinstance(n.value, str) and id(n) not in docstrings
    ]


def test_no_module_but_the_version_table_spells_the_newest_release() -> None:
    spelled = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if path == VERSION_TABLE:
            continue
        for node in _code_strings(ast.parse(path.read_text(encoding="utf-8"))):
            if RELEASE.search(node.value):
                spelled.append(f"{path.relative_to(PACKAGE)}:{node.lineno}: {node.value[:60]!r}")
    assert spelled == []
