"""The console entry point: a Ctrl-C is a silent exit 130 from its first instruction on.

The handler is installed before anything heavy is imported: typer, rich and pydantic take a few
hundred milliseconds, and a ``KeyboardInterrupt`` raised inside an import would print a traceback.
Only the standard library's ``os``, ``signal`` and ``sys`` are imported here.
"""

from __future__ import annotations

# the C function: signal.signal's Python wrapper is itself a window for a KeyboardInterrupt
import _signal  # type: ignore[import-not-found]
import os
import signal
import sys
from types import FrameType
from typing import NoReturn

EXIT_INTERRUPTED = 130  # 128 + SIGINT, as shells report it


def _exit_interrupted(signum: int, frame: FrameType | None) -> None:
    # while importing or exiting nothing is half done and nothing waits to be flushed
    os._exit(EXIT_INTERRUPTED)


# installed as this module is imported, before run() is called: a SIGINT that lands between the call and
# run()'s first instruction would otherwise raise a KeyboardInterrupt in run()'s own frame
_signal.signal(_signal.SIGINT, _exit_interrupted)


def run() -> NoReturn:
    """``[project.scripts]`` and ``python -m mmpool_cli``: run the CLI, Ctrl-C a silent 130 throughout."""
    _signal.signal(_signal.SIGINT, _exit_interrupted)  # again: a handler a caller set since the import
    import mmpool_cli

    # a run of one command imports only that command's module (mmpool_cli.cli checks the name)
    if len(sys.argv) > 1 and "_MMPOOL_COMPLETE" not in os.environ:
        mmpool_cli._cli_command = sys.argv[1]  # type: ignore[attr-defined]
    from mmpool_cli.cli import main

    try:
        # while the command runs a Ctrl-C is a KeyboardInterrupt, so that its cleanup runs (probe
        # processes stopped, temporary files removed); main() turns it into 130
        signal.signal(signal.SIGINT, signal.default_int_handler)
        code = main()
        signal.signal(signal.SIGINT, _exit_interrupted)
    except KeyboardInterrupt:
        signal.signal(signal.SIGINT, _exit_interrupted)
        code = EXIT_INTERRUPTED
    sys.exit(code)
