"""The command line: one module per command, registered on one typer app; ``main`` is the entry point."""

from __future__ import annotations

import importlib
import os
import sys
from typing import NoReturn

import typer

import mmpool_cli
from mmpool_cli.cli.app import app
from mmpool_cli.errors import EXIT_INTERNAL, EXIT_OK, EXIT_USAGE
from mmpool_cli.render import escape_undecodable

COMMANDS = ("cache", "check", "plan", "probe", "record", "schema", "simulate", "trace", "tune", "validate")
# The console entry point names the one command a run needs (``entry.run``): only that module is
# imported, since a run of ``simulate`` has no use for ``check``'s. Anything else (help, completion,
# an unknown word, the library's own users of ``app``) registers every command.
_wanted = getattr(mmpool_cli, "_cli_command", None)
for _name in (_wanted,) if _wanted in COMMANDS else COMMANDS:
    importlib.import_module(f"mmpool_cli.cli.{_name}")  # each registers its command

__all__ = ["app", "main", "run"]


def main(argv: list[str] | None = None) -> int:
    """Console entry point: run the app; usage errors as one line, bugs without a traceback."""
    try:
        result = app(args=argv, prog_name="mmpool", standalone_mode=False)
    except typer.TyperException as e:
        # typer's usage errors (exit 2) carry the command context for a help pointer
        ctx = getattr(e, "ctx", None)
        code = getattr(e, "exit_code", EXIT_USAGE)
        if type(e).__name__ == "NoArgsIsHelpError" and ctx is not None:
            typer.echo(ctx.get_help())
            return code
        where = f" (see '{ctx.command_path} --help')" if ctx is not None and code == EXIT_USAGE else ""
        typer.echo(escape_undecodable(f"mmpool: error: {e.format_message()}{where}"), err=True)
        return code
    except typer.Abort:
        typer.echo("mmpool: aborted", err=True)
        return 130
    except KeyboardInterrupt:
        return 130
    except Exception as e:  # noqa: BLE001 - the last line of defence: no traceback reaches a user
        if _interrupted(e):
            return 130
        if os.environ.get("MMPOOL_DEBUG"):
            raise
        typer.echo(
            f"mmpool: internal error: {type(e).__name__}: {e} "
            "(a bug in mmpool; set MMPOOL_DEBUG=1 to see the traceback and please report it)",
            err=True,
        )
        return EXIT_INTERNAL
    return result if isinstance(result, int) else EXIT_OK


def _interrupted(e: BaseException) -> bool:
    """Whether a Ctrl-C caused ``e``: Python wraps one raised inside class creation (``__set_name__``)."""
    seen: set[int] = set()
    cause: BaseException | None = e
    while cause is not None and id(cause) not in seen:
        if isinstance(cause, KeyboardInterrupt):
            return True
        seen.add(id(cause))
        cause = cause.__cause__ or cause.__context__
    return False


def run() -> NoReturn:
    """The console target of earlier installs; ``mmpool_cli.entry.run`` is the entry point now."""
    sys.exit(main())
