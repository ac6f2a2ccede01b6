"""Reading a configuration file's bytes without blocking: regular files only, bounded, UTF-8.

A missing, unreadable, non-regular (FIFO, device), oversized, binary or non-UTF-8 file, and a
silent stdin, become findings located at the file (or at the bad byte). Used by the YAML reader
(``yamlsrc``) and the dotenv reader alike. Pure core: the standard library only.
"""

from __future__ import annotations

import codecs
import os
import select
import stat
from typing import BinaryIO

from mmpool_cli.core.bounds import IDLE_TIMEOUT_S
from mmpool_cli.core.findings import Finding, Severity
from mmpool_cli.inputs.safe_open import Refused, open_regular

MAX_FILE_BYTES = 4 * 1024 * 1024
STDIN = "-"


def read_bytes(name: str, stdin: bytes | Finding | None = None) -> tuple[bytes | None, Finding | None]:
    """A file's bytes (``-`` is ``stdin``: what ``read_stdin`` gave), or the finding that says why they cannot be read.

    Only regular files are read, and never more than ``MAX_FILE_BYTES + 1`` bytes of them.
    """
    if name == STDIN and isinstance(stdin, Finding):
        return None, stdin
    raw: bytes | None = stdin if isinstance(stdin, bytes) else b""
    problem = None
    if name != STDIN:
        raw, problem = _read_regular(name)
    if raw is not None and len(raw) > MAX_FILE_BYTES:
        return None, Finding(
            Severity.error,
            "file-too-large",
            f"the {'input' if name == STDIN else 'file'} is larger than {MAX_FILE_BYTES // 2**20} MiB: "
            "not a configuration file",
            name,
        )
    return raw, problem


def read_stdin(stream: BinaryIO, idle_timeout: float = IDLE_TIMEOUT_S) -> bytes | Finding:
    """Standard input's bytes, at most one more than ``MAX_FILE_BYTES`` (enough to tell it is too large).

    A pipe, FIFO or terminal that stays silent for ``idle_timeout`` seconds gives a ``file-unreadable``
    finding instead of a wait without end; a redirected regular file is read at once.
    """
    try:
        fd = stream.fileno()
    except (AttributeError, OSError, ValueError):  # not a real file (io.UnsupportedOperation): it cannot wait
        return stream.read(MAX_FILE_BYTES + 1)
    try:
        regular = stat.S_ISREG(os.fstat(fd).st_mode)
    except OSError as e:
        return Finding(Severity.error, "file-unreadable", f"cannot read stdin: {e.strerror}", STDIN)
    if regular:
        return stream.read(MAX_FILE_BYTES + 1)
    chunks: list[bytes] = []
    size = 0
    while size <= MAX_FILE_BYTES:
        if not select.select([fd], [], [], idle_timeout)[0]:
            return Finding(
                Severity.error,
                "file-unreadable",
                f"no data for {idle_timeout:g} s after {size} bytes: is the writer still running? "
                "(--idle-timeout SECONDS waits longer)",
                STDIN,
            )
        try:
            chunk = os.read(fd, min(1 << 16, MAX_FILE_BYTES + 1 - size))
        except BlockingIOError:
            continue
        except OSError as e:
            return Finding(Severity.error, "file-unreadable", f"cannot read stdin: {e.strerror}", STDIN)
        if not chunk:
            break
        chunks.append(chunk)
        size += len(chunk)
    return b"".join(chunks)


def _read_regular(name: str) -> tuple[bytes | None, Finding | None]:
    def unreadable(why: str, code: str = "file-unreadable") -> tuple[None, Finding]:
        return None, Finding(Severity.error, code, why, name)

    try:
        with open_regular(name) as f:
            return f.read(MAX_FILE_BYTES + 1), None
    except Refused as e:
        return unreadable(e.reason, e.code)
    except OSError as e:
        return unreadable(f"cannot read the file: {e.strerror or type(e).__name__}")


def decode(
    name: str, raw: bytes, expected: str = "YAML; pass the configuration file"
) -> tuple[str | None, Finding | None]:
    """UTF-8 text (a BOM is allowed), or a ``file-binary``/``file-not-utf8`` finding at the bad byte.

    ``expected``: what the file should have been, and which file to pass, for the binary case.
    """
    if b"\0" in raw:
        return None, Finding(
            Severity.error,
            "file-binary",
            f"the file holds NUL bytes: it is binary, not {expected}",
            _byte_location(name, raw, raw.index(b"\0")),
        )
    try:
        return codecs.decode(raw, "utf-8-sig"), None
    except UnicodeDecodeError as e:
        offset = e.start + (3 if raw.startswith(codecs.BOM_UTF8) else 0)
        return None, Finding(
            Severity.error,
            "file-not-utf8",
            f"byte 0x{raw[offset]:02x} is not UTF-8: save the file as UTF-8",
            _byte_location(name, raw, offset),
        )


def _byte_location(name: str, raw: bytes, offset: int) -> str:
    line = raw.count(b"\n", 0, offset) + 1
    column = offset - (raw.rfind(b"\n", 0, offset) + 1) + 1
    return f"{name}:{line}:{column}"
