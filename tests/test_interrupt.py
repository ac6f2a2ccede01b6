"""Ctrl-C is a silent exit 130 from mmpool's first instruction on: during the imports, the command and the exit."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# The child says when mmpool's entry point is about to run; from then on any SIGINT must end it
# silently with 130, whether it lands in the imports (typer, rich, pydantic: a few hundred ms), the
# command or the interpreter's exit.
CHILD = "import sys\nfrom mmpool_cli.entry import run\nsys.stderr.write('go\\n')\nsys.stderr.flush()\nrun()\n"
DELAYS_S = [0.0, 0.002, 0.01, 0.03, 0.06, 0.1, 0.15, 0.25, 0.4, 0.7]


def _interrupted(argv: list[str], delay: float) -> tuple[int, bytes, bytes]:
    for _ in range(10):
        code, out, err = _once(argv, delay)
        # a signal sent at once may still land in the child's own two lines before run(), outside
        # mmpool (a traceback with no mmpool_cli frame): that one does not count, send it again
        if not (err.startswith(b"Traceback") and b"mmpool_cli" not in err):
            return code, out, err
    raise AssertionError(f"every SIGINT landed before the entry point: {err.decode(errors='replace')}")


def _once(argv: list[str], delay: float) -> tuple[int, bytes, bytes]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, *argv],
        stdin=subprocess.PIPE,  # held open: simulate --trace - waits on it until interrupted
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
        cwd=ROOT,
    )
    assert child.stderr is not None
    assert child.stderr.readline() == b"go\n"
    time.sleep(delay)
    child.send_signal(signal.SIGINT)
    out, err = child.communicate(timeout=60)
    return child.returncode, out, err


@pytest.mark.parametrize("argv", [["plan", "--size", "1GiB"], ["simulate", "--trace", "-"], ["validate", "-"]])
def test_ctrl_c_at_any_moment_is_a_silent_130(argv: list[str]) -> None:
    for delay in DELAYS_S:
        for _ in range(2):
            code, out, err = _interrupted(argv, delay)
            assert err == b"", (argv, delay, err.decode(errors="replace")[-800:])
            if argv[0] == "plan":  # it may have printed its plan, or even ended, before the signal came
                assert code in (0, 130, -signal.SIGINT), (argv, delay, code)
                continue
            # -SIGINT: the signal came while the interpreter was ending, after it restored the default
            # action; a shell reports 130 for that too
            assert code in (130, -signal.SIGINT), (argv, delay, code)
            assert out == b""


def test_console_script_and_dash_m_start_at_the_entry_point() -> None:
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    assert scripts == {"mmpool": "mmpool_cli.entry:run"}
    main = (ROOT / "mmpool_cli" / "__main__.py").read_text()
    assert "from mmpool_cli.entry import run" in main
    # the entry module imports nothing of mmpool's before it installs the handler
    code = "import sys\nimport mmpool_cli.entry\nprint(sorted(m for m in sys.modules if m.startswith(('mmpool_cli.', 'typer', 'rich', 'pydantic'))))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True)
    assert done.stdout.strip() == "['mmpool_cli.entry']"
