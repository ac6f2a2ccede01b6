"""Every example runs, so none goes stale."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def test_plan_from_python() -> None:
    result = subprocess.run(
        [sys.executable, str(EXAMPLES / "plan_from_python.py")], capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stderr
    assert "SGLANG_MM_FEATURE_CACHE_MB=2048" in result.stdout
    assert "10 per worker, 40 per node" in result.stdout
