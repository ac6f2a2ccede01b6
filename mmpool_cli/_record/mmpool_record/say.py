"""The one way the hook speaks: a line on stderr, prefixed, never an exception. Standard library only."""

from __future__ import annotations

import contextlib
import sys


def say(line: str) -> None:
    """One line on stderr, never an exception."""
    with contextlib.suppress(Exception):
        sys.stderr.write(f"mmpool record: {line}\n")
