"""Run a command in mmpool's place (``check --exec``, ``record``): the same process id, signals and exit status."""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from typing import NoReturn

import typer

from mmpool_cli.errors import EXIT_USAGE


def exec_command(command: list[str], environ: Mapping[str, str] | None = None) -> NoReturn:
    """Replace this process by ``command`` (with ``environ``, else mmpool's own); a failure is exit 2."""
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        if environ is None:
            os.execvp(command[0], command)
        else:
            os.execvpe(command[0], command, dict(environ))
    except OSError as e:
        typer.echo(f"mmpool: error: cannot run {command[0]!r}: {e.strerror or e}", err=True)
        raise typer.Exit(EXIT_USAGE) from None
