"""``mmpool record``: check everything a recording needs, then give the command's environment.

Nothing here runs the command (the CLI execs it, as ``check --exec`` does): this validates the
output directory, the metrics port and the command before anything starts, writes the run's
``recording.json``, and returns the environment that loads mmpool's hook in every Python process
beneath (``_record/`` first on ``PYTHONPATH``, the settings in ``MMPOOL_RECORD*``). No typer or rich.
"""

from __future__ import annotations

import ipaddress
import json
import os
import shutil
import socket
import sys
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
    metrics_addr: str = ""  # the interface of the port: every one by default, as exporters listen


@dataclass(frozen=True)
class Launch:
    """The command to exec and its environment, and the port the process beside it serves."""

    program: str  # the command's first word, resolved on PATH
    argv: list[str]
    environ: dict[str, str]
    out: str
    metrics_port: int | None = None
    metrics_addr: str = ""


def prepare(request: RecordRequest, environ: Mapping[str, str]) -> Launch:
    """Validate the request and create the recording; ``MmpoolError`` (exit 2) before anything starts."""
    if not request.command:
        raise MmpoolError("give the command to record after --, e.g. mmpool record -- python -m sglang.launch_server")
    if not hook_config.MIN_MAX_BYTES <= request.max_bytes <= MAX_FILE_BYTES:
        raise MmpoolError(f"--max-bytes: from {hook_config.MIN_MAX_BYTES} bytes to 1TiB, not {request.max_bytes}")
    program = _program(request.command[0], environ)
    addr = _addr(request.metrics_addr)
    if request.metrics_port is not None:
        _port_free(request.metrics_port, addr)
    elif addr:
        raise MmpoolError("--metrics-addr chooses the interface of --metrics-port: give the port too")
    if not request.out:
        raise MmpoolError("--out: empty; give a new or empty directory for the recording, e.g. --out rec1")
    out = os.path.abspath(request.out)
    _directory(out)
    env = dict(environ)
    path = env.get("PYTHONPATH", "")
    env["PYTHONPATH"] = HOOK_DIR + (os.pathsep + path if path else "")
    env[hook_config.ENV_DIR] = out
    env[hook_config.ENV_MAX_BYTES] = str(request.max_bytes)
    manifest = {
        "format": recfmt.RUN_FORMAT,
        "mmpool": __version__,
        "command": request.command,
        "started_unix_ns": time.time_ns(),
        "max_bytes": request.max_bytes,
        "metrics_port": request.metrics_port,
        "metrics_addr": addr or None,
    }
    try:
        with open(os.path.join(out, MANIFEST), "x", encoding="utf-8") as f:
            json.dump(manifest, f, indent=1)
            f.write("\n")
    except OSError as e:
        raise MmpoolError(f"--out {request.out}: cannot write {MANIFEST} ({e.strerror or e})") from None
    return Launch(program, list(request.command), env, out, request.metrics_port, addr)


def start_follower(launch: Launch) -> None:
    """Fork the process that follows the recording beside the command (``follow.py``): it serves the
    metrics and ends with the command, whose process this one becomes (exec), its parent."""
    parent = os.getpid()
    sys.stdout.flush()
    sys.stderr.flush()
    if os.fork() != 0:
        return
    code = 0
    try:
        _die_with_parent()
        devnull = os.open(os.devnull, os.O_RDWR)
        os.dup2(devnull, 0)
        os.dup2(devnull, 1)  # the command's output is its own; a line of this process's goes to stderr
        sys.path.insert(0, HOOK_DIR)
        from mmpool_record import follow  # type: ignore[import-not-found]

        follow.run(launch.out, parent, launch.metrics_port, launch.metrics_addr)
    except BaseException:  # noqa: BLE001 - never a traceback beside the command's output
        code = 1
    finally:
        os._exit(code)


def _die_with_parent() -> None:
    """Linux: SIGTERM when the command's process ends (the poll of getppid is the fallback elsewhere)."""
    try:
        import ctypes
        import signal

        ctypes.CDLL(None).prctl(1, int(signal.SIGTERM))  # PR_SET_PDEATHSIG
    except Exception:  # noqa: BLE001 - another system: the follower polls its parent instead
        pass


def _addr(text: str) -> str:
    if not text:
        return ""
    try:
        return str(ipaddress.ip_address(text.strip("[]")))
    except ValueError:
        raise MmpoolError(
            f"--metrics-addr {text!r}: an interface's IP address (127.0.0.1, ::1, 0.0.0.0); default: every one"
        ) from None


def _program(word: str, environ: Mapping[str, str]) -> str:
    found = shutil.which(word, path=environ.get("PATH", os.defpath))
    if found is None:
        if os.sep in word and os.path.exists(word):
            raise MmpoolError(f"cannot run {word!r}: it is not an executable file")
        raise MmpoolError(f"cannot run {word!r}: no such command on PATH")
    return found


def _port_free(port: int, addr: str) -> None:
    if not 1 <= port <= 65535:
        raise MmpoolError(f"--metrics-port: a TCP port from 1 to 65535, not {port}")
    family = socket.AF_INET6 if ":" in addr else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((addr, port))
        except OSError as e:
            where = f"{addr}:{port}" if addr else str(port)
            raise MmpoolError(
                f"--metrics-port {where}: cannot listen there ({e.strerror or e}); choose another"
            ) from None


def _directory(out: str) -> None:
    """``out`` exists as an empty or new directory that mmpool can write; no recording is overwritten."""
    if os.path.exists(out) and not os.path.isdir(out):
        raise MmpoolError(f"--out {out}: is a file, not a directory; give a directory for the recording")
    if os.path.isdir(out):
        try:
            with os.scandir(out) as entries:
                first = next((e.name for e in entries), None)  # one entry says enough, however many there are
        except OSError as e:
            raise MmpoolError(f"--out {out}: cannot read the directory ({e.strerror or e})") from None
        if os.path.lexists(os.path.join(out, MANIFEST)) or (first or "").startswith("pool-"):
            held = MANIFEST if os.path.lexists(os.path.join(out, MANIFEST)) else first
            raise MmpoolError(f"--out {out}: already holds a recording ({held}); give a new directory")
        if first is not None:
            # the recording's files beside other files would mix with them: only a new or empty directory
            raise MmpoolError(f"--out {out}: is not empty (holds {first!r}); give a new or empty directory")
    else:
        try:
            os.makedirs(out)
        except OSError as e:
            raise MmpoolError(f"--out {out}: cannot create the directory ({e.strerror or e})") from None
    if not os.access(out, os.W_OK | os.X_OK):
        raise MmpoolError(f"--out {out}: the directory is not writable")
