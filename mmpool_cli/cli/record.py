"""``mmpool record``: run a command with mmpool's hook in every Python process, recording its pools and caches."""

from __future__ import annotations

import os
import time
from typing import TYPE_CHECKING, Annotated

import typer

from mmpool_cli.cli.app import app, epilog, reported
from mmpool_cli.cli.launch import exec_command
from mmpool_cli.cli.options import size_arg

if TYPE_CHECKING:
    from mmpool_cli.usecases.record import Launch

OutOpt = Annotated[
    str | None,
    typer.Option(
        "--out", metavar="DIR", help="The recording's directory, new or empty (default: mmpool-record-<UTC time>)."
    ),
]
MetricsPortOpt = Annotated[
    int | None,
    typer.Option("--metrics-port", metavar="N", help="Serve the pools' metrics on this TCP port (Prometheus)."),
]
MetricsAddrOpt = Annotated[
    str,
    typer.Option("--metrics-addr", metavar="IP", help="The interface --metrics-port listens on (default: every one)."),
]
MaxBytesOpt = Annotated[
    str,
    typer.Option(
        "--max-bytes", metavar="SIZE", help="Each process's events start a new part past this size (4KiB to 1TiB)."
    ),
]


@app.command(
    context_settings={"allow_interspersed_args": False},
    short_help="Run a command and record what its multimodal pools and caches do.",
    epilog=epilog(
        [
            "mmpool record -- python -m sglang.launch_server --model-path MODEL --tp 2",
            "mmpool record --out rec1 --metrics-port 9400 -- sglang serve MODEL",
            "mmpool simulate --trace rec1 --events --format json",
        ],
        "the command's own exit status (mmpool execs it); 2 bad input (before the command starts): --out a "
        "file, unwritable or not empty, a port in use, a command that cannot be run; 70 internal error.",
    ),
)
def record(
    command: Annotated[list[str], typer.Argument(metavar="-- COMMAND...", help="The command to run, after --.")],
    out: OutOpt = None,
    metrics_port: MetricsPortOpt = None,
    metrics_addr: MetricsAddrOpt = "",
    max_bytes: MaxBytesOpt = "1GiB",
) -> None:
    """Run COMMAND with mmpool's recording hook: an exact trace of each SGLang feature pool, every lookup of
    SGLang's and vLLM's multimodal caches, and live metrics.

    Replay what was recorded with 'mmpool simulate --trace DIR' (the pools) and 'mmpool cache --trace DIR'
    (the caches).
    """
    launch = prepared(out, command, max_bytes, metrics_port, metrics_addr)
    launched(launch)


def launched(launch: Launch) -> None:
    """The process beside the command (it serves the metrics, and ends with the command), then the command."""
    from mmpool_cli.usecases.record import start_follower

    start_follower(launch)
    exec_command(launch.argv, launch.environ)


def prepared(
    out: str | None, command: list[str], max_bytes: str, metrics_port: int | None, metrics_addr: str = ""
) -> Launch:
    """The validated launch of a recording (``check --exec --record`` uses it too); exits 2 on bad input."""
    from mmpool_cli.usecases.record import RecordRequest, prepare

    with reported():
        where = out if out is not None else time.strftime("mmpool-record-%Y%m%dT%H%M%SZ", time.gmtime())
        size = size_arg("--max-bytes", max_bytes)
        return prepare(RecordRequest(where, command, size, metrics_port, metrics_addr), os.environ)
