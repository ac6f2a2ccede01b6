"""The hook is its own top-level package (``mmpool_record``), so the package-wide mypy run cannot
check it under that name: this test runs mypy strict on it as the server's Python imports it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

HOOK_ROOT = Path(__file__).resolve().parents[2] / "mmpool_cli" / "_record"


def test_the_hook_type_checks_strictly_as_its_own_package() -> None:
    pytest.importorskip("mypy", reason="mypy comes with the test extra")
    env = {**os.environ, "MYPYPATH": str(HOOK_ROOT)}
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "mypy",
            "--strict",
            "--no-incremental",
            "--explicit-package-bases",
            "-p",
            "mmpool_record",
        ],
        cwd=HOOK_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
