"""Every README console example shows what the command prints, so the docs cannot drift from the output.

A ```console block holds ``$ mmpool ...`` commands (a trailing backslash continues one), each
followed by its output. The output is compared line for line with what the command prints at
a fixed width without colour; a line ``...`` (or ``…``) stands for any lines, and a line ending
in ``…`` for any line that starts with the text before it. A change that alters an example's
output must update the README: ``python tests/test_readme.py --update`` re-records the examples
that elide nothing.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
PAGES = [README, *sorted((ROOT / "docs").glob("*.md"))]
# what a pipe or a CI log gets: rich's 80 columns, no colour
COLUMNS = "80"
ELIDED = ("...", "…")
README_MAX_LINES = 300  # a page a new user reads in five minutes; the reference is in docs/
ASSIGNMENT = re.compile(r"^[A-Z_][A-Z0-9_]*=")


@dataclass(frozen=True)
class Example:
    page: str  # relative to the repository's root
    line: int  # of the command in the page
    command: str
    expected: list[str]


def examples(text: str, page: str = "README.md") -> list[Example]:
    """The commands of every console block with the output written under each."""
    found: list[Example] = []
    for block in re.finditer(r"^( *)```console\n(.*?)^\1```", text, re.MULTILINE | re.DOTALL):
        indent = len(block.group(1))
        first = text.count("\n", 0, block.start(2)) + 1
        lines = [line[indent:] if line[:indent].isspace() else line for line in block.group(2).splitlines()]
        i = 0
        while i < len(lines):
            if not lines[i].startswith("$ "):
                raise AssertionError(f"{page}:{first + i}: output before any '$ ' command in a console block")
            start, command = i, lines[i][2:]
            while command.endswith("\\"):
                i += 1
                command = command[:-1] + " " + lines[i].strip()
            i += 1
            output = []
            while i < len(lines) and not lines[i].startswith("$ "):
                output.append(lines[i])
                i += 1
            found.append(Example(page, first + start, command, output))
    return found


def matches(expected: list[str], actual: list[str]) -> bool:
    """Whether the output fits the example, with its elisions."""
    if not expected:
        return not actual
    head, rest = expected[0], expected[1:]
    if head.strip() in ELIDED:
        return any(matches(rest, actual[n:]) for n in range(len(actual) + 1))
    if not actual:
        return False
    if head.endswith(ELIDED):
        prefix = head.rstrip(".…")
        return actual[0].startswith(prefix) and matches(rest, actual[1:])
    return head == actual[0] and matches(rest, actual[1:])


def run(command: str) -> str:
    """What the command shows on a terminal (stderr and stdout in the order written), run from the root."""
    argv = shlex.split(command)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SGLANG_", "SGL_", "PYTORCH_", "MMPOOL_"))}
    while argv and ASSIGNMENT.match(argv[0]):  # `NAME=value mmpool ...`, as a shell reads it
        name, _, value = argv.pop(0).partition("=")
        env[name] = value
    assert argv and argv[0] == "mmpool", command
    env |= {"COLUMNS": COLUMNS, "NO_COLOR": "1", "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-m", "mmpool_cli", *argv[1:]],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
        cwd=ROOT,
        check=False,
    )
    assert done.returncode in (0, 1), done.stdout
    return done.stdout


def _relative(page: Path) -> str:
    return page.relative_to(ROOT).as_posix()


EXAMPLES = [e for page in PAGES for e in examples(page.read_text(encoding="utf-8"), _relative(page))]


def test_the_readme_has_console_examples() -> None:
    readme = [e for e in EXAMPLES if e.page == "README.md"]
    assert len(readme) >= 5
    assert {e.command.split()[1] for e in readme} >= {"plan", "validate", "check", "simulate", "cache"}


def test_the_readme_runs_sglang_caches_on_a_shipped_example() -> None:
    """A new user follows the README alone: its ``mmpool cache`` example reads a file the repository ships."""
    caches = [e for e in EXAMPLES if e.page == "README.md" and e.command.split()[1] == "cache"]
    assert caches, "README.md shows no 'mmpool cache' example"
    files = [word for e in caches for word in shlex.split(e.command) if word.startswith("examples/")]
    assert files and all((ROOT / f).exists() for f in files), files


def test_the_first_line_says_what_the_tool_is_for() -> None:
    """The README's tagline, the package's description and the CLI's help are one sentence, naming both engines."""
    import tomllib

    tagline = README.read_text(encoding="utf-8").split("\n")[2].strip("*")
    description = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["description"]
    from mmpool_cli.cli.app import TAGLINE

    assert tagline == description == TAGLINE
    assert all(word in tagline.lower() for word in ("sglang", "vllm", "plan", "check", "simulate", "record")), tagline


def test_where_to_go_next_lists_every_reference_page() -> None:
    text = README.read_text(encoding="utf-8")
    section = text[text.index("## Where to go next") :]
    for page in ("docs/caches.md", "docs/curve.md"):
        assert f"]({page})" in section, page


def test_the_readme_is_short_and_the_reference_is_in_docs() -> None:
    lines = README.read_text(encoding="utf-8").count("\n")
    assert lines <= README_MAX_LINES, f"README.md has {lines} lines: move reference text to a page of docs/"
    assert len(PAGES) > 1


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda e: f"{e.page}:{e.line}")
def test_an_example_shows_what_the_command_prints(example: Example) -> None:
    actual = run(example.command).splitlines()
    assert matches(example.expected, actual), (
        f"{example.page}:{example.line}: '$ {example.command}' prints, at {COLUMNS} columns without colour:\n"
        + "\n".join(actual)
    )


def slug(heading: str) -> str:
    """The anchor GitHub gives a heading: lower case, punctuation dropped, spaces as hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def anchors(page: Path) -> set[str]:
    text = re.sub(r"^ *```.*?^ *```", "", page.read_text(encoding="utf-8"), flags=re.MULTILINE | re.DOTALL)
    found = {slug(m[1]) for m in re.finditer(r"^#{1,6} (.+)$", text, re.MULTILINE)}
    return found | set(re.findall(r'<a (?:id|name)="([^"]+)"', text))


LINK = re.compile(r"\]\(([^)\s]+)\)")


def links() -> list[tuple[str, str]]:
    return [
        (_relative(page), target)
        for page in PAGES
        for target in LINK.findall(page.read_text(encoding="utf-8"))
        if not re.match(r"[a-z]+:", target)
    ]


@pytest.mark.parametrize(("page", "target"), links(), ids=lambda x: str(x))
def test_every_link_names_a_file_and_a_heading_of_the_repository(page: str, target: str) -> None:
    path, _, fragment = target.partition("#")
    file = (ROOT / page).parent / path if path else ROOT / page
    assert file.exists(), f"{page}: link to {target}: no such file"
    if fragment:
        assert fragment in anchors(file), f"{page}: link to {target}: no heading of {path or page} has that anchor"


def test_every_docs_page_is_linked_from_the_readme() -> None:
    readme = {(ROOT / t.partition("#")[0]).resolve() for p, t in links() if p == "README.md"}
    assert [_relative(p) for p in PAGES[1:] if p.resolve() not in readme] == []


@pytest.mark.parametrize(
    ("expected", "actual", "ok"),
    [
        (["a", "b"], ["a", "b"], True),
        (["a", "b"], ["a", "c"], False),
        (["a", "..."], ["a", "b", "c"], True),
        (["a", "...", "d"], ["a", "b", "c", "d"], True),
        (["a", "...", "d"], ["a", "b", "c"], False),
        (["a…"], ["abc"], True),
        (["a", "  …"], ["a"], True),
        (["a"], ["a", "extra"], False),
    ],
)
def test_elisions(expected: list[str], actual: list[str], ok: bool) -> None:
    assert matches(expected, actual) is ok


def test_indented_blocks_are_examples_too() -> None:
    text = "1. Replay it:\n\n   ```console\n   $ mmpool plan\n   out\n   ```\n"
    assert examples(text) == [Example("README.md", 4, "mmpool plan", ["out"])]


def update(text: str, page: str = "README.md") -> str:
    """The page with every example that elides nothing re-recorded (those with '...' are edited by hand)."""
    for example in reversed(examples(text, page)):
        if any(line.strip() in ELIDED or line.endswith(ELIDED) for line in example.expected):
            continue
        lines = text.split("\n")
        start = example.line - 1
        indent = lines[start][: len(lines[start]) - len(lines[start].lstrip())]
        while lines[start].endswith("\\"):
            start += 1
        end = start + 1 + len(example.expected)
        lines[start + 1 : end] = [(indent + line).rstrip() for line in run(example.command).splitlines()]
        text = "\n".join(lines)
    return text


if __name__ == "__main__":
    # python tests/test_readme.py --update: re-record the examples after an intended output change
    if sys.argv[1:] != ["--update"]:
        raise SystemExit("usage: python tests/test_readme.py --update")
    for page in PAGES:
        page.write_text(update(page.read_text(encoding="utf-8"), _relative(page)), encoding="utf-8")
