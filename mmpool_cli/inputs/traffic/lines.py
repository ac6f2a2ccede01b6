"""Numbered lines of a log file, streamed in bounded memory (one line at most ``MAX_LINE_BYTES``).

Pure core: standard library only.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import BinaryIO

from mmpool_cli.inputs.safe_open import Refused
from mmpool_cli.inputs.safe_open import open_regular as open_regular_file
from mmpool_cli.inputs.traffic.model import TrafficError

MAX_LINE_BYTES = 1 << 28  # 256 MiB: a level-3 log line holding several 4K images whole
_CHUNK = 1 << 20


def open_regular(path: str) -> BinaryIO:
    """``path`` opened for binary reading, refused unless it is a regular file.

    A FIFO or device could block for ever or be read only once (the format is sniffed first):
    such input is an error that says to save it to a file.

    Raises:
        TrafficError: missing, unreadable, a directory, or not a regular file.
    """
    if path == "-":
        raise TrafficError("-: logs are read from files, not stdin (a stream is sniffed, then read); save it to a file")
    try:
        return open_regular_file(path, buffering=_CHUNK)
    except Refused as e:
        if e.strerror is not None:
            raise TrafficError(f"{path}: cannot open the log ({e.strerror})") from None
        raise TrafficError(f"{path}: {e.reason}") from None


def open_lines(path: str) -> Iterator[tuple[int, bytes | None]]:
    """``(line number, bytes without the newline)``; ``None`` for a line over ``MAX_LINE_BYTES``.

    Raises:
        TrafficError: the file cannot be opened or is not a regular file or pipe.
    """
    f = open_regular(path)
    try:
        lineno = 0
        while True:
            try:
                line = f.readline(MAX_LINE_BYTES + 1)
            except OSError as e:
                raise TrafficError(f"{path}: cannot read the log ({e.strerror})") from None
            if not line:
                return
            lineno += 1
            if len(line) > MAX_LINE_BYTES and not line.endswith(b"\n"):
                while line and not line.endswith(b"\n"):  # drop the rest of the long line
                    line = f.readline(_CHUNK)
                yield lineno, None
                continue
            yield lineno, line.rstrip(b"\r\n")
    finally:
        f.close()
