"""`mmpool --show-completion SHELL`: the script of the shell named, whatever shell runs mmpool."""

from __future__ import annotations

import pytest

from mmpool_cli.cli import main

# a line only that shell's script has
MARKS = {
    "bash": "complete -o default -F _mmpool_completion mmpool",
    "zsh": "compdef _mmpool_completion mmpool",
    "fish": "complete --command mmpool",
    "powershell": "Register-ArgumentCompleter -Native -CommandName mmpool",
    "pwsh": "Register-ArgumentCompleter -Native -CommandName mmpool",
}


@pytest.mark.parametrize("shell", sorted(MARKS))
@pytest.mark.parametrize("form", ["word", "equals"])
def test_show_completion_prints_the_named_shells_script(shell: str, form: str, capsys) -> None:
    argv = ["--show-completion", shell] if form == "word" else [f"--show-completion={shell}"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert MARKS[shell] in out
    others = {m for s, m in MARKS.items() if m != MARKS[shell]}
    assert not any(m in out for m in others), out


def test_unknown_shell_is_a_usage_error(capsys) -> None:
    assert main(["--show-completion", "tcsh"]) == 2
    err = capsys.readouterr().err
    assert "unknown shell 'tcsh'" in err and "zsh" in err


def test_help_says_a_shell_may_be_named(capsys) -> None:
    assert main(["--help"]) == 0
    assert "SHELL" in capsys.readouterr().out
