"""The docs' console examples hold no figure that changes with what a user installed (issue 36, item 19).

``tests/test_readme.py`` checks each example against what the command prints; this checks that no
example would then hold the FFmpeg release PyAV bundles, which changes with the PyAV installed.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
_CONSOLE = re.compile(r"```console\n(.*?)```", re.DOTALL)
_INSTALLED = re.compile(r"FFmpeg \d+\.\d+")


def test_no_console_example_pins_the_ffmpeg_pyav_bundles() -> None:
    pinned = []
    for page in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        for block in _CONSOLE.findall(page.read_text()):
            pinned += [f"{page.name}: {line}" for line in block.splitlines() if _INSTALLED.search(line)]
    assert pinned == []
