"""docs/development.md says how to run every test the README's command skips (issue 36, item 20).

What the tests take from outside Python's packages is found in their source: the programs they
look up on ``PATH`` and the variables of the test run itself (``MMPOOL_*`` names mmpool's own code
never reads). Each must be named on the page, with how to provide it.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _sources(folder: str) -> str:
    return "".join(p.read_text() for p in sorted((ROOT / folder).rglob("*.py")))


def test_every_program_a_test_looks_for_is_named_with_how_to_get_it() -> None:
    page = (ROOT / "docs" / "development.md").read_text()
    programs = set(re.findall(r'shutil\.which\("([\w-]+)"\)', _sources("tests"))) - {"mmpool"}
    assert {"ffmpeg", "prometheus"} <= programs  # what the README's command skips without
    assert sorted(p for p in programs if f"{p}" not in page) == []


def test_every_variable_of_the_test_run_is_named() -> None:
    page = (ROOT / "docs" / "development.md").read_text()
    product = _sources("mmpool_cli")
    read = set(re.findall(r'environ\.get\("(MMPOOL_\w+)"', _sources("tests")))
    knobs = {name for name in read if name not in product}
    assert "MMPOOL_SGLANG_WHEEL" in knobs
    assert sorted(name for name in knobs if f"`{name}`" not in page) == []


def test_the_whole_commands_time_is_on_the_page() -> None:
    page = (ROOT / "docs" / "development.md").read_text()
    assert re.search(r"took \d+ s on a quiet machine", page) and "--durations" in page
