"""mmpool's exception tree and the exit codes its CLI documents.

Pure core: imports nothing beyond the standard library.
"""

from __future__ import annotations

EXIT_OK = 0
EXIT_FINDINGS = 1
# a report whose answer is "not good enough" (simulate's fallback, a cache's hits below target): printed
# whole, as a finding's report is; mmpool's own failures are 2 (usage, input) and 70 (a bug), never 1
EXIT_BELOW_TARGET = EXIT_FINDINGS
EXIT_USAGE = 2
EXIT_UNAVAILABLE = 3
EXIT_INTERNAL = 70


class MmpoolError(Exception):
    """Base of every error mmpool raises on purpose; its message is for the user."""

    exit_code = EXIT_USAGE


class SizeError(MmpoolError, ValueError):
    """A size string that is not an exact, non-negative number of bytes.

    A ValueError too, so pydantic and typer treat it as invalid input.
    """
