"""Every finding code the vLLM engine emits is in its table, with the severity it is emitted at."""

from __future__ import annotations

import re
from pathlib import Path

from mmpool_cli.engines.vllm.codes import CODES

PKG = Path(__file__).resolve().parents[3] / "mmpool_cli" / "engines" / "vllm"
EMIT = re.compile(r"Severity\.(error|warning|info),\s*\"([a-z0-9-]+)\"")


def test_the_table_is_complete_and_the_severities_agree():
    emitted: dict[str, set[str]] = {}
    for path in PKG.glob("*.py"):
        for severity, code in EMIT.findall(path.read_text()):
            emitted.setdefault(code, set()).add(severity)
    assert set(emitted) <= set(CODES), sorted(set(emitted) - set(CODES))
    for code, severities in emitted.items():
        assert severities == {CODES[code][0]}, code
    source = "".join(p.read_text() for p in PKG.glob("*.py") if p.name != "codes.py")
    assert [c for c in CODES if f'"{c}"' not in source] == []  # no code is listed that nothing emits
