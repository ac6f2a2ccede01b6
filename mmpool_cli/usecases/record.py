"""``mmpool record``: check everything a recording needs, then give the command's environment.

Nothing here runs the command (the CLI execs it, as ``check --exec`` does): this validates the
output directory, the metrics port and the command before anything starts, writes the run's
``recording.json``, and returns the environment that loads mmpool's hook in every Python process
beneath (``_record/`` first on ``PYTHONPATH``, the settings in ``MMPOOL_RECORD*``). No typer or rich.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import time
from collections.abc import Mapping
from dataclasses import dataclass

from mmpool_cli import __version__
from mmpool_cli._record.mmpool_record import config as hook_config
from mmpool_cli._record.mmpool_record import recfmt
from mmpool_cli.errors import MmpoolError

HOOK_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "_record")
MANIFEST = recfmt.RUN_MANIFEST
MAX_FILE_BYTES = 1 << 40  # 1 TiB per pool file: far beyond any recording, and a bound
DEFAULT_MAX_BYTES = hook_config.DEFAULT_MAX_BYTES


@dataclass(frozen=True)
class RecordRequest:
    """One recording: where, how large each pool's file may grow, the metrics port, the command."""

    out: str
    command: list[str]
    max_bytes: int = DEFAULT_MAX_BYTES
    metrics_port: int | None = None


@dataclass(frozen=True)
class Launch:
    """The command to exec and its environment."""

    program: str  # the command's first word, resolved on PATH
    argv: list[str]
    environ: dict[str, str]
    out: str


def prepare(request: RecordRequest, environ: Mapping[str, str]) -> Launch:
    """Validate the request and create the recording; ``MmpoolError`` (exit 2) before anything starts."""
    if not request.command:
        raise MmpoolError("give the command to record after --, e.g. mmpool record -- python -m sglang.launch_server")
    if not hook_config.MIN_MAX_BYTES <= request.max_bytes <= MAX_FILE_BYTES:
        raise MmpoolError(f"--max-bytes: from {hook_config.MIN_MAX_BYTES} bytes to 1TiB, not {request.max_bytes}")
    program = _program(request.command[0], environ)
    if request.metrics_port is not None:
        _port_free(request.metrics_port)
    out = os.path.abspath(request.out)
    _directory(out)
    env = dict(environ)
    path = env.get("PYTHONPATH", "")
    env["PYTHONPATH"] = HOOK_DIR + (os.pathsep + path if path else "")
    env[hook_config.ENV_DIR] = out
    env[hook_config.ENV_MAX_BYTES] = str(request.max_bytes)
    if request.metrics_port is not None:
        env[hook_config.ENV_METRICS_PORT] = str(request.metrics_port)
    else:
        env.pop(hook_config.ENV_METRICS_PORT, None)
    manifest = {
        "format": recfmt.RUN_FORMAT,
        "mmpool": __version__,
        "command": request.command,
        "started_unix_ns": time.time_ns(),
        "max_bytes": request.max_bytes,
        "metrics_port": request.metrics_port,
    }
    try:
        with open(os.path.join(out, MANIFEST), "x", encoding="utf-8") as f:
            json.dump(manifest, f, indent=1)
            f.write("\n")
    except OSError as e:
        raise MmpoolError(f"--out {request.out}: cannot write {MANIFEST} ({e.strerror or e})") from None
    return Launch(program, list(request.command), env, out)


def _program(word: str, environ: Mapping[str, str]) -> str:
    found = shutil.which(word, path=environ.get("PATH", os.defpath))
    if found is None:
        if os.sep in word and os.path.exists(word):
            raise MmpoolError(f"cannot run {word!r}: it is not an executable file")
        raise MmpoolError(f"cannot run {word!r}: no such command on PATH")
    return found


def _port_free(port: int) -> None:
    if not 1 <= port <= 65535:
        raise MmpoolError(f"--metrics-port: a TCP port from 1 to 65535, not {port}")
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("", port))
        except OSError as e:
            raise MmpoolError(
                f"--metrics-port {port}: cannot listen there ({e.strerror or e}); choose another"
            ) from None


def _directory(out: str) -> None:
    """``out`` exists as an empty or new directory that mmpool can write; no recording is overwritten."""
    if os.path.exists(out) and not os.path.isdir(out):
        raise MmpoolError(f"--out {out}: is a file, not a directory; give a directory for the recording")
    if os.path.isdir(out):
        held = [n for n in os.listdir(out) if n == MANIFEST or n.startswith("pool-")]
        if held:
            raise MmpoolError(f"--out {out}: already holds a recording ({held[0]}); give a new directory")
    else:
        try:
            os.makedirs(out)
        except OSError as e:
            raise MmpoolError(f"--out {out}: cannot create the directory ({e.strerror or e})") from None
    if not os.access(out, os.W_OK | os.X_OK):
        raise MmpoolError(f"--out {out}: the directory is not writable")
