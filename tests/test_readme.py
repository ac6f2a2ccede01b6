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
# what a pipe or a CI log gets: rich's 80 columns, no colour
COLUMNS = "80"
ELIDED = ("...", "…")


@dataclass(frozen=True)
class Example:
    line: int  # of the command in README.md
    command: str
    expected: list[str]


def examples(text: str) -> list[Example]:
    """The commands of every console block with the output written under each."""
    found: list[Example] = []
    for block in re.finditer(r"^```console\n(.*?)^```", text, re.MULTILINE | re.DOTALL):
        first = text.count("\n", 0, block.start(1)) + 1
        lines = block.group(1).splitlines()
        i = 0
        while i < len(lines):
            if not lines[i].startswith("$ "):
                raise AssertionError(f"README.md:{first + i}: output before any '$ ' command in a console block")
            start, command = i, lines[i][2:]
            while command.endswith("\\"):
                i += 1
                command = command[:-1] + " " + lines[i].strip()
            i += 1
            output = []
            while i < len(lines) and not lines[i].startswith("$ "):
                output.append(lines[i])
                i += 1
            found.append(Example(first + start, command, output))
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
    argv = shlex.split(command)
    assert argv[0] == "mmpool", command
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SGLANG_", "SGL_", "PYTORCH_", "MMPOOL_"))}
    env |= {"COLUMNS": COLUMNS, "NO_COLOR": "1", "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-m", "mmpool_cli", *argv[1:]], capture_output=True, text=True, env=env, cwd=ROOT, check=False
    )
    assert done.returncode in (0, 1), done.stderr
    return done.stdout


EXAMPLES = examples(README.read_text(encoding="utf-8"))


def test_the_readme_has_console_examples() -> None:
    assert len(EXAMPLES) >= 5
    assert {e.command.split()[1] for e in EXAMPLES} >= {"plan", "validate", "check", "simulate"}


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda e: f"README.md:{e.line}")
def test_a_readme_example_shows_what_the_command_prints(example: Example) -> None:
    actual = run(example.command).splitlines()
    assert matches(example.expected, actual), (
        f"README.md:{example.line}: '$ {example.command}' prints, at {COLUMNS} columns without colour:\n"
        + "\n".join(actual)
    )


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


def update(text: str) -> str:
    """The README with every example that elides nothing re-recorded (those with '...' are edited by hand)."""
    for example in reversed(examples(text)):
        if any(line.strip() in ELIDED or line.endswith(ELIDED) for line in example.expected):
            continue
        lines = text.split("\n")
        start = example.line - 1
        while lines[start].endswith("\\"):
            start += 1
        end = start + 1 + len(example.expected)
        lines[start + 1 : end] = run(example.command).splitlines()
        text = "\n".join(lines)
    return text


if __name__ == "__main__":
    # python tests/test_readme.py --update: re-record the examples after an intended output change
    if sys.argv[1:] != ["--update"]:
        raise SystemExit("usage: python tests/test_readme.py --update")
    README.write_text(update(README.read_text(encoding="utf-8")), encoding="utf-8")
