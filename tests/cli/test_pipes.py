"""A closed stdout (``| head -1``) ends every command quietly with 0; ``-o`` takes a device, never a file."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent.parent
LOG = "tests/engines/sglang/traffic/data/sglang-0.5.23/server-json-level2.log"
LAUNCH = ["python", "-m", "sglang.launch_server", "--model-path", "M"]


def _closed_stdout(argv: list[str]) -> subprocess.CompletedProcess[str]:
    """Run mmpool with a stdout whose reader is gone before the first write (what `| head -1` leaves)."""
    read, write = os.pipe()
    os.close(read)
    try:
        return subprocess.run(
            [sys.executable, "-m", "mmpool_cli", *argv],
            stdout=write,
            stderr=subprocess.PIPE,
            text=True,
            cwd=ROOT,
            env={**os.environ, "MMPOOL_PURE_PYTHON": "1"},
            timeout=120,
            check=False,
        )
    finally:
        os.close(write)


@pytest.mark.parametrize(
    "argv",
    [
        ["plan"],
        ["plan", "--format", "json"],
        ["--help"],
        ["plan", "--help"],
        ["schema"],
        ["validate", "examples/mmpool.yaml"],
        ["check", "--", *LAUNCH],
        ["simulate", "--feature-size", "48MiB", "--concurrency", "4", "--requests", "20"],
        ["trace", "--model", "qwen2.5-vl", LOG],
    ],
    ids=lambda a: " ".join(a[:2]),
)
def test_a_closed_stdout_ends_quietly_with_0(argv: list[str]) -> None:
    result = _closed_stdout(argv)
    assert (result.returncode, result.stderr) == (0, "")


def test_trace_writes_to_a_device(run_line) -> None:
    result = run_line(["mmpool", "trace", "--model", "qwen2.5-vl", LOG, "-o", os.devnull])
    assert result.exit_code == 0, result.output
    assert "mmpool trace: 7 requests" in result.stderr


def test_trace_still_never_overwrites_a_regular_file_or_a_link_to_one(run_line, tmp_path: Path) -> None:
    mine = tmp_path / "mine.jsonl"
    mine.write_text("mine\n")
    link = tmp_path / "link.jsonl"
    link.symlink_to(mine)
    for out in (mine, link):
        result = run_line(["mmpool", "trace", "--model", "qwen2.5-vl", LOG, "-o", str(out)])
        assert result.exit_code == 2
        assert "exists; mmpool never overwrites a file" in result.stderr
    assert mine.read_text() == "mine\n"
