"""The typer application every command module registers on, and how output reaches the terminal."""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Annotated, Any

import typer
import typer.core
import typer.main
import typer.models

from mmpool_cli import __version__
from mmpool_cli.core.units import parse_int
from mmpool_cli.errors import MmpoolError
from mmpool_cli.render import Rendered, Rich, escape_undecodable


def _ascii_int(value: str | int) -> int:
    try:
        return parse_int(value)
    except ValueError as e:
        raise typer.BadParameter(str(e)) from None


# One rule for every integer option, the one sizes follow: typer reads each ``int`` option through
# its click's IntParamType (IntRange derives from it), whose int() takes '٤' and '1_000'.
_INT_TYPE = type(typer.main.get_click_type(annotation=int, parameter_info=typer.models.OptionInfo()))
_INT_TYPE._number_class = staticmethod(_ascii_int)  # type: ignore[attr-defined]


def quiet_stdout() -> None:
    """After a reader closed stdout (``| head -1``): what is still buffered goes nowhere, not to a traceback."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, sys.stdout.fileno())
    finally:
        os.close(devnull)


class _Group(typer.core.TyperGroup):
    """The command group: a closed stdout ends any command quietly with 0, as Python's own tools do.

    click's answer (exit 1 once its wrapper swallowed the ``BrokenPipeError``) would read as a failure
    in a pipeline whose reader simply had enough. Help is written while the context is made.
    """

    def make_context(self, *args: Any, **kwargs: Any) -> Any:
        from mmpool_cli.cli import completion

        named = completion.named_shell(list(args[1]) if len(args) > 1 else list(kwargs.get("args", [])))
        if named is not None:
            completion.run(*named)
            raise typer.Exit(0)
        try:
            return super().make_context(*args, **kwargs)
        except BrokenPipeError:
            quiet_stdout()
            raise typer.Exit(0) from None

    def get_params(self, ctx: Any) -> Any:
        from mmpool_cli.cli import completion

        params = super().get_params(ctx)
        for param in params:
            if param.name in completion.HELP:
                param.help = completion.HELP[param.name]  # type: ignore[attr-defined]
        return params

    def invoke(self, ctx: Any) -> Any:
        try:
            return super().invoke(ctx)
        except BrokenPipeError:
            quiet_stdout()
            raise typer.Exit(0) from None


# what mmpool is for: the README's first line and the package's description say the same
TAGLINE = (
    "Plan, check, simulate and record the multimodal memory of SGLang and vLLM servers: "
    "feature pools, caches, decode pools."
)

app = typer.Typer(
    cls=_Group,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=True,
    rich_markup_mode=None,
    context_settings={"help_option_names": ["-h", "--help"]},
    help=TAGLINE,
)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"mmpool {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[
        bool, typer.Option("--version", callback=_version, is_eager=True, help="Show the version and exit.")
    ] = False,
) -> None:
    """The commands; the help is ``TAGLINE``."""


def epilog(examples: list[str], exits: str) -> str:
    """A command's help epilog: examples kept as written (click's \\b), then its exit codes."""
    lines = "\n".join(f"  $ {e}" for e in examples)
    return f"\b\nExamples:\n{lines}\n\nExit codes: {exits}"


@contextmanager
def reported() -> Iterator[None]:
    """Turn mmpool's own errors into a one-line message on stderr and their exit code."""
    try:
        yield
    except MmpoolError as e:
        typer.echo(escape_undecodable(f"mmpool: error: {e}"), err=True)
        raise typer.Exit(e.exit_code) from None


# A run of spaces at the end of a line, before any style escapes that close it.
_TRAILING_SPACE = re.compile(r"[ \t]+((?:\x1b\[[0-9;]*m)*)$", re.MULTILINE)


def emit(output: Rendered, *, err: bool = False) -> None:
    """Write a renderer's output: text as is, a rich renderable through a console (rich loads only here).

    Lines are never cropped (a command to copy stays on one line whatever the width), carry no
    trailing spaces, and with ``NO_COLOR`` set carry no style escapes at all, bold and dim included.
    """
    if isinstance(output, Rich):
        from rich.console import Console

        plain = bool(os.environ.get("NO_COLOR"))
        console = Console(
            highlight=False, soft_wrap=output.soft_wrap, stderr=err, color_system=None if plain else "auto"
        )
        with console.capture() as captured:
            console.print(output.renderable, crop=False)
        # the console already chose whether to style (a terminal, FORCE_COLOR, NO_COLOR): keep its choice
        text = escape_undecodable(_TRAILING_SPACE.sub(r"\1", captured.get()))
        typer.echo(text, nl=False, err=err, color=True)
    elif output:  # --quiet with nothing to say prints nothing
        typer.echo(output, err=err)
