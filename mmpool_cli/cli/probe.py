"""``mmpool probe``: the pools measured on the real GPU. torch loads only in the probe's children."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Mapping
from dataclasses import replace
from fractions import Fraction
from typing import Annotated, TypeVar

import typer

from mmpool_cli.cli.app import app, emit, epilog, reported
from mmpool_cli.cli.options import (
    EngineChoice,
    EnvFileOpt,
    EnvOpt,
    FormatOpt,
    OutputFormat,
    SglangOnlyEngineOpt,
    environment,
    only_sglang,
    sglang_release,
    told,
)
from mmpool_cli.cli.pool_options import PoolOptions, with_pool_options
from mmpool_cli.engines.sglang.env_vars import read_launch_env
from mmpool_cli.engines.sglang.models import PlanRequest
from mmpool_cli.errors import EXIT_FINDINGS, EXIT_OK, MmpoolError
from mmpool_cli.render import render

MAX_TIMEOUT_S = 3600
T = TypeVar("T")


@app.command(
    short_help="Measure the pools on the real GPU.",
    epilog=epilog(
        ["mmpool probe", "mmpool probe --size 1GiB --workers 4 --tp 8 --mem-fraction-static 0.85"],
        "0 every stage passed; 1 a stage failed (the report is still printed); 2 usage error; "
        "3 the probe cannot run here (no torch, nvidia-ml-py, driver or GPU); 70 internal error.",
    ),
)
@with_pool_options
def probe(
    ctx: typer.Context,
    pool: PoolOptions,
    mem_fraction_static: Annotated[
        str | None,
        typer.Option(
            "--mem-fraction-static",
            metavar="FRACTION",
            help="SGLang's --mem-fraction-static, to check the KV headroom.",
        ),
    ] = None,
    config: Annotated[
        str | None,
        typer.Option("--config", metavar="FILE", help="Take the pool from an mmpool config file instead of flags."),
    ] = None,
    env: EnvOpt = None,
    env_file: EnvFileOpt = None,
    ipc: Annotated[bool, typer.Option("--ipc/--no-ipc", help="Run the CUDA IPC round trips.")] = True,
    allocate_anyway: Annotated[
        bool, typer.Option("--allocate-anyway", help="Allocate even when the pools are predicted not to fit.")
    ] = False,
    timeout: Annotated[
        float,
        typer.Option(
            "--timeout",
            metavar="SECONDS",
            help="Seconds the whole probe may take, from its start to the release of every process "
            f"(more than 0, at most {MAX_TIMEOUT_S}). When they run out the probe stops its processes, "
            "allowing a few seconds to release the GPU, and reports child-timeout.",
        ),
    ] = 120.0,
    output: FormatOpt = OutputFormat.human,
    engine: SglangOnlyEngineOpt = EngineChoice.sglang,
) -> None:
    """Measure the pools on the real GPU: allocate, verify, share through CUDA IPC, release."""
    from mmpool_cli.probe.devices import ProbeUnavailable
    from mmpool_cli.probe.runner import ProbeRequest
    from mmpool_cli.usecases.probe import probe as run_probe
    from mmpool_cli.usecases.probe import unavailable_report

    with reported():
        only_sglang(engine, "probe")
        if not 0 < timeout <= MAX_TIMEOUT_S:  # NaN fails this too
            raise MmpoolError(
                f"--timeout: {timeout:g} seconds is out of range: use more than 0 and at most {MAX_TIMEOUT_S} "
                "seconds, e.g. 120"
            )
        environ, _ = environment(False, env_file, env)
        launch = read_launch_env(environ)
        plan_request = (
            pool.request(environ, told(ctx)) if config is None else _config_request(config, environ, pool, output)
        )
        request = ProbeRequest(
            plan=plan_request,
            cuda_visible_devices=launch.cuda_visible_devices,
            alloc_conf=launch.alloc_conf,
            mem_fraction_static=_fraction(mem_fraction_static),
            ipc=ipc,
            allocate_anyway=allocate_anyway,
            timeout=timeout,
        )
        try:
            report = _with_progress(lambda note: run_probe(request, note), show=output is OutputFormat.human)
        except ProbeUnavailable as e:
            if output is OutputFormat.json:  # one JSON document on stdout for every exit status
                emit(render("probe", "json", unavailable_report(request, e)))
            raise
    emit(render("probe", output.value, report))
    raise typer.Exit(EXIT_FINDINGS if report.status == "fail" else EXIT_OK)


def _config_request(path: str, environ: Mapping[str, str], pool: PoolOptions, output: OutputFormat) -> PlanRequest:
    """The plan request of an mmpool config file; its findings end the run (exit 1) when it has errors."""
    given = sorted(set(pool.given()) - {"--sglang-version"})
    if given:
        raise MmpoolError(f"--config takes the pool from the file; drop {', '.join(given)} or drop --config")
    from mmpool_cli.engines.sglang.files import mmpool_config
    from mmpool_cli.usecases.probe import invalid_input_report

    result, request = mmpool_config(path, environ)
    if request is None and result.fails(strict=False):
        # the probe's own report, with the file's findings as its inputs and no stage run
        emit(render("probe", output.value, invalid_input_report(result)))
        raise typer.Exit(EXIT_FINDINGS)
    if request is None:
        raise MmpoolError(f"{path}: pool.transport is cpu, so there is no pool to probe")
    version, chosen = sglang_release(pool.sglang_version, environ)
    return replace(request, sglang_version=version, sglang_version_chosen=chosen)


def _fraction(text: str | None) -> Fraction | None:
    if text is None:
        return None
    try:
        value = Fraction(text)
    except (ValueError, ZeroDivisionError):
        raise MmpoolError(f"--mem-fraction-static: {text!r} is not a number; use e.g. 0.85") from None
    if not 0 < value < 1:
        raise MmpoolError(f"--mem-fraction-static: {text} is not between 0 and 1; use e.g. 0.85")
    return value


def _with_progress(work: Callable[[Callable[[str], None]], T], show: bool) -> T:
    """Run ``work(note)`` with a spinner on stderr naming the current step (humans on a terminal only).

    A terminal that should get no escapes (``NO_COLOR`` set, ``TERM=dumb``) gets one plain line per step.
    """
    if not show or not sys.stderr.isatty():
        return work(lambda _message: None)
    if os.environ.get("NO_COLOR") or os.environ.get("TERM") == "dumb":

        def line(message: str) -> None:
            print(f"mmpool probe: {message}", file=sys.stderr, flush=True)

        return work(line)
    from rich.console import Console

    with Console(stderr=True).status("probing") as status:
        return work(lambda message: status.update(message))
