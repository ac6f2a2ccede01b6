"""Help that reads on an 80-column terminal, with examples and exit codes, and shell completion."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

COMMANDS = ["plan", "probe", "validate", "check", "schema", "simulate"]


def _mmpool(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    environ = {**os.environ, "COLUMNS": "80", **env}
    return subprocess.run(
        [sys.executable, "-m", "mmpool_cli", *args], capture_output=True, text=True, env=environ, check=False
    )


@pytest.mark.parametrize("command", [None, *COMMANDS])
def test_help_fits_80_columns_uncut(command: str | None) -> None:
    result = _mmpool(*([command] if command else []), "--help")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert max(len(line) for line in lines) <= 80
    assert "…" not in result.stdout  # nothing cut to fit
    assert all(line == line.rstrip() for line in lines)


@pytest.mark.parametrize("command", COMMANDS)
def test_help_has_an_example_and_the_exit_codes(command: str) -> None:
    out = _mmpool(command, "--help").stdout
    assert f"$ mmpool {command}" in out
    assert "Exit codes: 0 " in out


def test_long_option_names_are_shown_whole() -> None:
    out = _mmpool("plan", "--help").stdout
    assert "--workers, --tokenizer-worker-num N" in out
    assert "--transport, --mm-feature-transport <cuda_ipc|cuda_vmm>" in out


def test_completion_script_and_answers() -> None:
    script = _mmpool("--show-completion", "bash")
    assert script.returncode == 0
    assert "_mmpool_completion" in script.stdout
    answer = _mmpool(_MMPOOL_COMPLETE="complete_bash", COMP_WORDS="mmpool plan --fo", COMP_CWORD="2")
    assert answer.stdout.split() == ["--format"]
