"""vLLM's registry lists no code that nothing in the engine emits (tests/core/test_codes.py checks the rest)."""

from __future__ import annotations

from pathlib import Path

from mmpool_cli.engines.vllm.codes import VLLM

PKG = Path(__file__).resolve().parents[3] / "mmpool_cli" / "engines" / "vllm"


def test_every_registered_code_is_emitted_somewhere():
    source = "".join(p.read_text() for p in PKG.glob("*.py") if p.name != "codes.py")
    assert [c for c in VLLM.codes if f'"{c}"' not in source] == []
    assert all(c.startswith("vllm-") for c in VLLM.codes)
