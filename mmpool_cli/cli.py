"""The command line: parse flags, call the core, render, choose the exit code."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from enum import StrEnum
from fractions import Fraction
from typing import Annotated, NoReturn

import typer

from mmpool_cli import __version__
from mmpool_cli.errors import EXIT_FINDINGS, EXIT_INTERNAL, EXIT_OK, EXIT_USAGE, MmpoolError, SizeError
from mmpool_cli.models import Budget, PlanRequest
from mmpool_cli.output import to_json
from mmpool_cli.plan import budget_from_env, make_plan
from mmpool_cli.sglang import DEFAULT_VMM_GRANULARITY, expandable_segments_enabled
from mmpool_cli.units import parse_size

app = typer.Typer(
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
    context_settings={"help_option_names": ["-h", "--help"]},
    help="Plan and check SGLang's multimodal feature-transport pools before launch.",
)


class OutputFormat(StrEnum):
    human = "human"
    json = "json"


class TransportChoice(StrEnum):
    cuda_ipc = "cuda_ipc"
    cuda_vmm = "cuda_vmm"


def _version(value: bool) -> None:
    if value:
        typer.echo(f"mmpool {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[
        bool, typer.Option("--version", callback=_version, is_eager=True, help="Show the version and exit.")
    ] = False,
) -> None:
    """Plan and check SGLang's multimodal feature-transport pools before launch."""


def size_arg(flag: str, text: str) -> int:
    """Parse a size flag's text, turning a bad size into a usage error (exit 2)."""
    try:
        return parse_size(text)
    except SizeError as e:
        raise MmpoolError(f"{flag}: {e}") from None


@contextmanager
def reported() -> Iterator[None]:
    """Turn mmpool's own errors into a one-line message on stderr and their exit code."""
    try:
        yield
    except MmpoolError as e:
        typer.echo(f"mmpool: error: {e}", err=True)
        raise typer.Exit(e.exit_code) from None


def emit_human(renderable: object) -> None:
    """Print a rich renderable to stdout (rich loads only here and in render)."""
    from rich.console import Console

    Console(highlight=False, soft_wrap=False).print(renderable)


SizeOpt = Annotated[
    str | None,
    typer.Option(
        "--size",
        metavar="SIZE",
        help="Pool budget for the node, e.g. 1GiB, 512MiB, 2GB. "
        "Default: SGLANG_MM_FEATURE_CACHE_MB as SGLang reads it, else SGLang's 1024 MiB.",
    ),
]
WorkersOpt = Annotated[
    int, typer.Option("--workers", "--tokenizer-worker-num", help="Tokenizer workers (--tokenizer-worker-num).")
]
TpOpt = Annotated[int, typer.Option("--tp", "--tp-size", help="Tensor-parallel size.")]
DpOpt = Annotated[int, typer.Option("--dp", "--dp-size", help="Data-parallel size.")]
AttnDpOpt = Annotated[
    int, typer.Option("--attn-dp-size", help="Attention data-parallel size (fewer consumers per feature).")
]
DpaOpt = Annotated[
    bool, typer.Option("--enable-dp-attention", help="SGLang's deprecated alias for --attn-dp-size <dp-size>.")
]
TransportOpt = Annotated[TransportChoice, typer.Option("--transport", "--mm-feature-transport", help="Pool transport.")]
GranularityOpt = Annotated[
    str, typer.Option("--vmm-granularity", metavar="SIZE", help="CUDA VMM allocation granularity (cuda_vmm only).")
]
FeatureOpt = Annotated[
    list[str] | None,
    typer.Option("--feature-size", metavar="SIZE", help="Bytes of one feature tensor, e.g. 6MiB; repeat for several."),
]
GpuOpt = Annotated[int, typer.Option("--base-gpu-id", help="GPU that holds the pools (--base-gpu-id).")]
ContextOpt = Annotated[
    str | None,
    typer.Option("--context-size", metavar="SIZE", help="CUDA context per tokenizer process, for the HBM estimate."),
]
FormatOpt = Annotated[OutputFormat, typer.Option("--format", help="Output format.")]


@app.command()
def plan(
    size: SizeOpt = None,
    workers: WorkersOpt = 1,
    tp: TpOpt = 1,
    dp: DpOpt = 1,
    attn_dp_size: AttnDpOpt = 1,
    enable_dp_attention: DpaOpt = False,
    transport: TransportOpt = TransportChoice.cuda_ipc,
    vmm_granularity: GranularityOpt = "2MiB",
    feature_size: FeatureOpt = None,
    base_gpu_id: GpuOpt = 0,
    context_size: ContextOpt = None,
    output: FormatOpt = OutputFormat.human,
) -> None:
    """Show exactly what SGLang will do with a pool budget: split, header, capacity, HBM."""
    with reported():
        request = _plan_request(
            size,
            workers,
            tp,
            dp,
            attn_dp_size,
            enable_dp_attention,
            transport,
            vmm_granularity,
            feature_size,
            base_gpu_id,
            context_size,
        )
    result = make_plan(request)
    if output is OutputFormat.json:
        typer.echo(to_json(result))
    else:
        from mmpool_cli.render import plan_human

        emit_human(plan_human(result))
    raise typer.Exit(EXIT_FINDINGS if result.status == "fail" else EXIT_OK)


def _plan_request(
    size: str | None,
    workers: int,
    tp: int,
    dp: int,
    attn_dp_size: int,
    enable_dp_attention: bool,
    transport: TransportChoice,
    vmm_granularity: str,
    feature_size: list[str] | None,
    base_gpu_id: int,
    context_size: str | None,
) -> PlanRequest:
    environ = os.environ
    if size is not None:
        budget = Budget(bytes=size_arg("--size", size), source="flag")
    else:
        budget = budget_from_env(environ)
    granularity = size_arg("--vmm-granularity", vmm_granularity)
    if granularity <= 0:
        raise MmpoolError(f"--vmm-granularity: must be positive (default {DEFAULT_VMM_GRANULARITY} bytes)")
    return PlanRequest(
        budget=budget,
        workers=workers,
        tp_size=tp,
        dp_size=dp,
        attn_dp_size=attn_dp_size,
        enable_dp_attention=enable_dp_attention,
        transport=transport.value,
        vmm_granularity=granularity,
        feature_sizes=tuple(size_arg("--feature-size", s) for s in feature_size or ()),
        base_gpu_id=base_gpu_id,
        expandable_segments=expandable_segments_enabled(environ.get("PYTORCH_CUDA_ALLOC_CONF")),
        context_bytes=None if context_size is None else size_arg("--context-size", context_size),
    )


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


@app.command()
def probe(
    size: SizeOpt = None,
    workers: WorkersOpt = 1,
    tp: TpOpt = 1,
    dp: DpOpt = 1,
    attn_dp_size: AttnDpOpt = 1,
    enable_dp_attention: DpaOpt = False,
    transport: TransportOpt = TransportChoice.cuda_ipc,
    vmm_granularity: GranularityOpt = "2MiB",
    feature_size: FeatureOpt = None,
    base_gpu_id: GpuOpt = 0,
    context_size: ContextOpt = None,
    mem_fraction_static: Annotated[
        str | None,
        typer.Option("--mem-fraction-static", help="SGLang's --mem-fraction-static, to check the KV headroom."),
    ] = None,
    ipc: Annotated[bool, typer.Option("--ipc/--no-ipc", help="Run the CUDA IPC round trips.")] = True,
    allocate_anyway: Annotated[
        bool, typer.Option("--allocate-anyway", help="Allocate even when the pools are predicted not to fit.")
    ] = False,
    timeout: Annotated[float, typer.Option("--timeout", help="Seconds any probe process may take to answer.")] = 120.0,
    output: FormatOpt = OutputFormat.human,
) -> None:
    """Measure the pools on the real GPU: allocate, verify, share through CUDA IPC, release."""
    with reported():
        plan_request = _plan_request(
            size,
            workers,
            tp,
            dp,
            attn_dp_size,
            enable_dp_attention,
            transport,
            vmm_granularity,
            feature_size,
            base_gpu_id,
            context_size,
        )
        from mmpool_cli.probe.runner import ProbeRequest, run_probe

        request = ProbeRequest(
            plan=plan_request,
            cuda_visible_devices=os.environ.get("CUDA_VISIBLE_DEVICES"),
            alloc_conf=os.environ.get("PYTORCH_CUDA_ALLOC_CONF"),
            mem_fraction_static=_fraction(mem_fraction_static),
            ipc=ipc,
            allocate_anyway=allocate_anyway,
            timeout=timeout,
        )
        report = _with_progress(lambda note: run_probe(request, note), show=output is OutputFormat.human)
    if output is OutputFormat.json:
        typer.echo(to_json(report))
    else:
        from mmpool_cli.render import probe_human

        emit_human(probe_human(report))
    raise typer.Exit(EXIT_FINDINGS if report.status == "fail" else EXIT_OK)


def _with_progress(work, show: bool):
    """Run ``work(note)`` with a spinner on stderr naming the current step (humans only)."""
    if not show or not sys.stderr.isatty():
        return work(lambda _message: None)
    from rich.console import Console

    with Console(stderr=True).status("probing") as status:
        return work(lambda message: status.update(message))


def main(argv: list[str] | None = None) -> int:
    """Console entry point: run the app; usage errors as one line, bugs without a traceback."""
    try:
        result = app(args=argv, prog_name="mmpool", standalone_mode=False)
    except typer.TyperException as e:
        # typer's usage errors (exit 2) carry the command context for a help pointer
        ctx = getattr(e, "ctx", None)
        code = getattr(e, "exit_code", EXIT_USAGE)
        if type(e).__name__ == "NoArgsIsHelpError" and ctx is not None:
            typer.echo(ctx.get_help())
            return code
        where = f" (see '{ctx.command_path} --help')" if ctx is not None and code == EXIT_USAGE else ""
        typer.echo(f"mmpool: error: {e.format_message()}{where}", err=True)
        return code
    except typer.Abort:
        typer.echo("mmpool: aborted", err=True)
        return 130
    except KeyboardInterrupt:
        return 130
    except Exception as e:  # noqa: BLE001 - the last line of defence: no traceback reaches a user
        if os.environ.get("MMPOOL_DEBUG"):
            raise
        typer.echo(
            f"mmpool: internal error: {type(e).__name__}: {e} "
            "(a bug in mmpool; set MMPOOL_DEBUG=1 to see the traceback and please report it)",
            err=True,
        )
        return EXIT_INTERNAL
    return result if isinstance(result, int) else EXIT_OK


def run() -> NoReturn:
    """``[project.scripts]`` target."""
    sys.exit(main())
