"""simulate's progress on a real terminal (a pty): no cursor escapes under NO_COLOR, no blank lines under TERM=dumb."""

from __future__ import annotations

import os
import pty
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent.parent
SEARCH = ["simulate", "--feature-size", "8MiB", "--rate", "20", "--requests", "200", "--smallest-budget"]


def _stderr_on_a_terminal(env: dict[str, str]) -> str:
    """What simulate writes to stderr when stderr is a terminal (stdout is a pipe, as in '| less')."""
    main, child = pty.openpty()
    full = {k: v for k, v in os.environ.items() if k not in ("NO_COLOR", "TERM", "FORCE_COLOR")}
    process = subprocess.Popen(
        [sys.executable, "-m", "mmpool_cli", *SEARCH],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=child,
        env={**full, **env},
    )
    os.close(child)
    chunks = []
    while True:
        try:
            data = os.read(main, 4096)
        except OSError:  # EIO: the child closed the terminal
            break
        if not data:
            break
        chunks.append(data)
    os.close(main)
    process.communicate(timeout=120)
    assert process.returncode == 0
    return b"".join(chunks).decode("utf-8", "replace")


@pytest.mark.parametrize(
    "env", [{"NO_COLOR": "1", "TERM": "xterm-256color"}, {"TERM": "dumb"}], ids=["NO_COLOR", "dumb"]
)
def test_a_terminal_that_takes_no_escapes_gets_plain_lines(env: dict[str, str]) -> None:
    shown = _stderr_on_a_terminal(env)
    assert "\x1b" not in shown
    lines = shown.replace("\r\n", "\n").split("\n")
    assert [line for line in lines[:-1] if not line.strip()] == []  # no blank line
    assert lines[0].startswith("mmpool simulate: ")


def test_a_terminal_that_takes_escapes_gets_the_live_line() -> None:
    shown = _stderr_on_a_terminal({"TERM": "xterm-256color"})
    assert "\x1b[?25l" in shown  # the cursor hidden while the line is live: the check above can see escapes
