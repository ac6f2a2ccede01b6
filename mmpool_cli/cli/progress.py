"""Progress on stderr: a live line on a terminal that takes escapes, one plain line on one that does not.

A terminal with ``NO_COLOR`` set or ``TERM=dumb`` gets no cursor escapes (rich's live line hides
the cursor and redraws with ``ESC[2K``/``ESC[1A``, and on a dumb terminal leaves blank lines), so
it is told once, plainly, what is running. A pipe or file gets nothing.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Callable, Iterator


def plain_terminal() -> bool:
    """Whether stderr is a terminal that should get no escapes (``NO_COLOR``, ``TERM=dumb``)."""
    return bool(os.environ.get("NO_COLOR")) or os.environ.get("TERM") == "dumb"


@contextlib.contextmanager
def counting(command: str, what: str) -> Iterator[Callable[[int], None]]:
    """A progress line for ``what`` while the block runs; the callable it gives takes the count done."""
    if not sys.stderr.isatty():
        yield lambda _done: None
        return
    if plain_terminal():
        print(f"mmpool {command}: {what} ...", file=sys.stderr, flush=True)
        yield lambda _done: None
        return
    from rich.console import Console
    from rich.progress import BarColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    columns = [SpinnerColumn(), TextColumn(what), BarColumn(), TextColumn("{task.completed} done"), TimeElapsedColumn()]
    with Progress(*columns, console=Console(stderr=True), transient=True) as bar:
        task = bar.add_task(what, total=None)
        yield lambda done: bar.update(task, completed=done)
