"""Bounded reading of a trace's bytes: a file, a pipe or stdin, a chunk at a time.

Lines are at most ``MAX_LINE_BYTES``, and a pipe or FIFO that stays silent for ``idle_timeout``
seconds is an error rather than a hang.
"""

from __future__ import annotations

import codecs
import os
import select
import stat
import sys
from collections.abc import Iterator

from mmpool_cli.errors import MmpoolError

MAX_LINE_BYTES = 4096
IDLE_TIMEOUT_S = 30.0
_CHUNK = 1 << 18


class TraceError(MmpoolError):
    """A trace that cannot be read or replayed as it stands (exit 2)."""


def batches(path: str, name: str, idle_timeout: float) -> Iterator[tuple[int, list[bytes]]]:
    """Lines of ``path`` without their newlines, a bounded chunk's worth at a time, with the first's number."""
    lineno = 0
    pending = b""
    for chunk in chunks(path, name, idle_timeout):
        lines = (pending + chunk).split(b"\n")
        pending = lines.pop()
        if max(map(len, lines), default=0) > MAX_LINE_BYTES:
            long = next(i for i, line in enumerate(lines) if len(line) > MAX_LINE_BYTES)
            yield lineno + 1, lines[:long]  # the lines before it first: an earlier error is reported first
            raise TraceError(f"{name}:{lineno + long + 1}: line longer than {MAX_LINE_BYTES} bytes")
        yield lineno + 1, lines
        lineno += len(lines)
        if len(pending) > MAX_LINE_BYTES:
            raise TraceError(f"{name}:{lineno + 1}: line longer than {MAX_LINE_BYTES} bytes")
    if pending:
        yield lineno + 1, [pending]


def chunks(path: str, name: str, idle_timeout: float) -> Iterator[bytes]:
    """The bytes of ``path`` (``-``: stdin), a bounded chunk at a time, without a leading UTF-8 BOM."""
    if path == "-":
        fd = sys.stdin.fileno()
        if os.isatty(fd):
            raise TraceError("--trace -: stdin is a terminal; pipe a trace into mmpool or give a file")
        owned = False
    else:
        try:
            # non-blocking, so that opening a FIFO with no writer yet does not block
            fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
        except OSError as e:
            raise TraceError(f"{name}: cannot open the trace ({e.strerror})") from None
        owned = True
    try:
        mode = os.fstat(fd).st_mode
        if stat.S_ISDIR(mode):
            raise TraceError(f"{name}: is a directory; give a JSON-lines trace file")
        waits = not stat.S_ISREG(mode)
        pending = b""
        bom_checked = False
        while True:
            if waits and not select.select([fd], [], [], idle_timeout)[0]:
                raise TraceError(f"{name}: no data for {idle_timeout:g} s; is the writer still running?")
            try:
                chunk = os.read(fd, _CHUNK)
            except BlockingIOError:
                continue
            except OSError as e:
                raise TraceError(f"{name}: cannot read the trace ({e.strerror})") from None
            if not chunk:
                break
            if not bom_checked:  # a UTF-8 BOM may start the file, as it may start a config
                head = pending + chunk
                if len(head) < len(codecs.BOM_UTF8) and codecs.BOM_UTF8.startswith(head):
                    pending = head  # too short to tell yet: decide with the next chunk
                    continue
                pending, chunk, bom_checked = b"", head.removeprefix(codecs.BOM_UTF8), True
            yield chunk
        if pending:  # fewer bytes than a BOM: the whole trace
            yield pending
    finally:
        if owned:
            os.close(fd)
