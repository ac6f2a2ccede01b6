"""Open a file the user named, refusing in bounded time anything that is not a regular file.

One rule for every path mmpool reads (configs, env files, logs, images and videos a request names):
``stat`` first, so a device is never even opened; open with ``O_NONBLOCK``, so a FIFO without a
writer never waits; ``fstat`` the open file, for a path swapped in between. A directory, FIFO,
device or socket is refused with the same message and finding code wherever it is given.
Pure core: standard library only.
"""

from __future__ import annotations

import os
import stat
from typing import BinaryIO


class Refused(OSError):
    """A path mmpool will not read: ``code`` is the finding code, ``reason`` says why and what to do.

    ``strerror`` is the system's own word for a file that could not be opened (None for a FIFO,
    device, socket or directory, which are refused before or without reading).
    """

    def __init__(self, code: str, reason: str, strerror: str | None = None) -> None:
        super().__init__(reason)
        self.code = code
        self.reason = reason
        self.strerror = strerror


def not_regular(mode: int) -> tuple[str, str] | None:
    """``(reason, code)`` for a ``st_mode`` that is not a regular file; None for a regular file."""
    if stat.S_ISREG(mode):
        return None
    if stat.S_ISDIR(mode):
        return "this is a directory, not a file", "file-unreadable"
    kinds = ((stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISCHR, "a character device"), (stat.S_ISSOCK, "a socket"))
    kind = next((name for test, name in kinds if test(mode)), "a block device" if stat.S_ISBLK(mode) else "special")
    return (
        f"this is {kind}, not a regular file: mmpool reads only regular files (reading this could block "
        "or never end); save the content to a file first",
        "file-not-regular",
    )


def open_regular(path: str, buffering: int = -1) -> BinaryIO:
    """``path`` opened for blocking binary reads, once it is known to be a regular file.

    Raises:
        Refused: missing (``file-missing``), unreadable or a directory (``file-unreadable``), or a
            FIFO, device or socket (``file-not-regular``); never blocks to find out.
    """
    try:
        problem = not_regular(os.stat(path).st_mode)
        if problem:
            raise Refused(problem[1], problem[0])
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except Refused:
        raise
    except FileNotFoundError as e:
        raise Refused("file-missing", "no such file: check the path", e.strerror) from None
    except (OSError, ValueError) as e:  # ValueError: a NUL byte in the path
        why = getattr(e, "strerror", None) or str(e)
        raise Refused("file-unreadable", f"cannot read the file: {why}", why) from None
    try:
        problem = not_regular(os.fstat(fd).st_mode)
        if problem:
            raise Refused(problem[1], problem[0])
        os.set_blocking(fd, True)
        f = os.fdopen(fd, "rb", buffering=buffering)
    except BaseException:
        os.close(fd)
        raise
    return f
