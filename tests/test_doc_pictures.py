"""The pictures in docs/ are what the commands the docs give for them draw today."""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# a ```sh block of a page whose command ends with --plot docs/NAME.svg
_BLOCK = re.compile(r"```sh\n(mmpool [^`]*?--plot (docs/[\w.-]+\.svg))\n```")


def _pictures() -> list[tuple[str, str]]:
    found = []
    for page in sorted((ROOT / "docs").glob("*.md")):
        for command, picture in _BLOCK.findall(page.read_text()):
            found.append((command.replace("\\\n", " "), picture))
    return found


def _texts(svg: str) -> list[str]:
    # matplotlib writes every text it draws (titles, labels, ticks, legends) as a comment before it
    return re.findall(r"<!-- (.*?) -->", svg)


def test_the_docs_give_a_command_for_their_picture() -> None:
    assert {"docs/simulate.svg", "docs/caches.svg", "docs/tune.svg"} <= {p for _, p in _pictures()}, _pictures()


@pytest.mark.parametrize(("command", "picture"), _pictures(), ids=[p for _, p in _pictures()])
def test_a_picture_shows_what_its_command_draws_now(command: str, picture: str, tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    fresh = tmp_path / "fresh.svg"
    argv = shlex.split(command)
    argv[argv.index(picture)] = str(fresh)
    subprocess.run([sys.executable, "-m", "mmpool_cli", *argv[1:]], cwd=ROOT, capture_output=True, timeout=600)
    assert fresh.is_file(), command
    assert _texts((ROOT / picture).read_text()) == _texts(fresh.read_text()), (
        f"{picture} is stale: run {command}"
    )
