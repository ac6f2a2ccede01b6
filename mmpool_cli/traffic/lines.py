"""Numbered lines of a log file, streamed in bounded memory (one line at most ``MAX_LINE_BYTES``).

Pure core: standard library only.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator

from mmpool_cli.traffic.model import TrafficError

MAX_LINE_BYTES = 1 << 28  # 256 MiB: a level-3 log line holding several 4K images whole
_CHUNK = 1 << 20


def open_lines(path: str) -> Iterator[tuple[int, bytes | None]]:
    """``(line number, bytes without the newline)``; ``None`` for a line over ``MAX_LINE_BYTES``.

    Raises:
        TrafficError: the file cannot be opened or is not a regular file or pipe.
    """
    try:
        f = open(path, "rb", buffering=_CHUNK)  # noqa: SIM115 - closed in the finally below
    except OSError as e:
        raise TrafficError(f"{path}: cannot open the log ({e.strerror})") from None
    try:
        if stat.S_ISDIR(os.fstat(f.fileno()).st_mode):
            raise TrafficError(f"{path}: is a directory; give a log file")
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
