"""The recording's settings, read from the environment ``mmpool record`` sets for the command.

Standard library only: this package runs inside the server's own Python, where mmpool is not installed.

The environment variables (the one contract between ``mmpool record``, the bootstrap and the metrics):

``MMPOOL_RECORD``                 the recording's directory; unset or empty: the hook does nothing at all
``MMPOOL_RECORD_MAX_BYTES``       bytes per events file before it rotates (default 1 GiB)
``MMPOOL_RECORD_BUFFER``          events the allocating thread may queue for the writer (default 65536);
                                  when full, new events are dropped and counted, never waited for
``MMPOOL_RECORD_DIGESTS``         an extra digests file (JSON, the layout of ``digests.json``) for a
                                  patched or vendored pool whose methods were reviewed by hand
"""

from __future__ import annotations

import os
from dataclasses import dataclass

ENV_DIR = "MMPOOL_RECORD"
ENV_MAX_BYTES = "MMPOOL_RECORD_MAX_BYTES"
ENV_BUFFER = "MMPOOL_RECORD_BUFFER"
ENV_DIGESTS = "MMPOOL_RECORD_DIGESTS"

DEFAULT_MAX_BYTES = 1 << 30
MIN_MAX_BYTES = 4096
DEFAULT_BUFFER = 65536


@dataclass(frozen=True)
class Config:
    """What one process records: where, how much, and the buffer."""

    out_dir: str
    max_bytes: int = DEFAULT_MAX_BYTES
    buffer: int = DEFAULT_BUFFER
    digests: str | None = None


def _int(environ: dict[str, str] | os._Environ[str], name: str, default: int | None, low: int) -> int | None:
    text = environ.get(name, "").strip()
    if not text:
        return default
    value = int(text)  # a bad value raises ValueError: from_environ's caller says so once and records nothing
    if value < low:
        raise ValueError(f"{name}={text}: at least {low}")
    return value


def from_environ(environ: dict[str, str] | os._Environ[str] | None = None) -> Config | None:
    """The settings of this process, or None when recording is off (``MMPOOL_RECORD`` unset or empty).

    Raises ValueError on a malformed value; ``mmpool record`` validates them first, so that means a
    hand-set environment.
    """
    env = os.environ if environ is None else environ
    out_dir = env.get(ENV_DIR, "")
    if not out_dir:
        return None
    return Config(
        out_dir=out_dir,
        max_bytes=_int(env, ENV_MAX_BYTES, DEFAULT_MAX_BYTES, MIN_MAX_BYTES) or DEFAULT_MAX_BYTES,
        buffer=_int(env, ENV_BUFFER, DEFAULT_BUFFER, 1) or DEFAULT_BUFFER,
        digests=env.get(ENV_DIGESTS) or None,
    )
