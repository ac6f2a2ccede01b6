"""``--show-completion SHELL`` and ``--install-completion SHELL``: the shell the user names, not the one detected.

typer's own options are flags (with shellingham installed) that detect the running shell and leave a
word after them unread, so ``mmpool --show-completion zsh`` printed the bash script from a bash
prompt. The root group reads the word here first; without one, typer's detection stands.
"""

from __future__ import annotations

import typer

SHELLS = ("bash", "zsh", "fish", "powershell", "pwsh")
_OPTIONS = ("--show-completion", "--install-completion")
HELP = {
    "install_completion": "Install completion for the current shell, or for SHELL given after it "
    f"({', '.join(SHELLS)}).",
    "show_completion": "Print the completion script of the current shell, or of SHELL given after it.",
}


def named_shell(args: list[str]) -> tuple[str, str] | None:
    """The completion option and the shell named after it among the root's leading options, if any."""
    for i, arg in enumerate(args):
        if not arg.startswith("-"):
            return None  # the command: its own options are its own
        option, eq, value = arg.partition("=")
        if option not in _OPTIONS:
            continue
        if eq:
            shell = value
        elif i + 1 < len(args) and not args[i + 1].startswith("-"):
            shell = args[i + 1]
        else:
            return None  # no word: the detected shell
        if shell not in SHELLS:
            raise typer.BadParameter(
                f"unknown shell {shell!r}: choose one of {', '.join(SHELLS)}", param_hint=f"'{option}'"
            )
        return option, shell
    return None


def run(option: str, shell: str) -> None:
    """Print or install the completion script of ``shell`` for ``mmpool``."""
    from typer._completion_shared import get_completion_script, install

    if option == "--show-completion":
        typer.echo(get_completion_script(prog_name="mmpool", complete_var="_MMPOOL_COMPLETE", shell=shell))
        return
    name, path = install(shell=shell, prog_name="mmpool", complete_var="_MMPOOL_COMPLETE")
    typer.echo(f"{name} completion installed in {path}")
    typer.echo("Completion will take effect once you restart the terminal")
