"""The command line: parse flags, call the core, render, choose the exit code."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterator, Mapping
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


class ReportFormat(StrEnum):
    human = "human"
    json = "json"
    github = "github"


class KindChoice(StrEnum):
    auto = "auto"
    mmpool = "mmpool"
    sglang = "sglang"


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


# The pool flags `plan` and `probe` share, with their defaults.
POOL_FLAG_DEFAULTS = {
    "size": None,
    "workers": 1,
    "tp": 1,
    "dp": 1,
    "attn_dp_size": 1,
    "enable_dp_attention": False,
    "transport": TransportChoice.cuda_ipc,
    "vmm_granularity": "2MiB",
    "feature_size": None,
    "base_gpu_id": 0,
    "context_size": None,
}


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
    values = locals()
    with reported():
        pool_flags = {name: values[name] for name in POOL_FLAG_DEFAULTS}
        request = _plan_request(os.environ, **pool_flags)
    result = make_plan(request)
    if output is OutputFormat.json:
        typer.echo(to_json(result))
    else:
        from mmpool_cli.render import plan_human

        emit_human(plan_human(result))
    raise typer.Exit(EXIT_FINDINGS if result.status == "fail" else EXIT_OK)


def _plan_request(
    environ: Mapping[str, str],
    *,
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
    """The plan request that the pool flags of ``plan`` and ``probe`` make."""
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


def _config_request(
    path: str, environ: Mapping[str, str], pool_flags: dict[str, object], output: OutputFormat
) -> PlanRequest:
    """The plan request of an mmpool config file; its findings end the run (exit 1) when it has errors."""
    given = sorted(k for k, v in pool_flags.items() if v != POOL_FLAG_DEFAULTS[k])
    if given:
        flags = ", ".join("--" + k.replace("_", "-") for k in given)
        raise MmpoolError(f"--config takes the pool from the file; drop {flags} or drop --config")
    from mmpool_cli.models import Report
    from mmpool_cli.validate import mmpool_config

    result, request = mmpool_config(path, environ)
    if request is None and result.fails(strict=False):
        emit_report(Report(command="validate", results=[result]), ReportFormat(output.value))
        raise typer.Exit(EXIT_FINDINGS)
    if request is None:
        raise MmpoolError(f"{path}: pool.transport is cpu, so there is no pool to probe")
    return request


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
    timeout: Annotated[float, typer.Option("--timeout", help="Seconds any probe process may take to answer.")] = 120.0,
    output: FormatOpt = OutputFormat.human,
) -> None:
    """Measure the pools on the real GPU: allocate, verify, share through CUDA IPC, release."""
    values = locals()
    with reported():
        environ, _ = _environment(False, env_file, env)
        pool_flags = {name: values[name] for name in POOL_FLAG_DEFAULTS}
        if config is None:
            plan_request = _plan_request(environ, **pool_flags)
        else:
            plan_request = _config_request(config, environ, pool_flags, output)
        from mmpool_cli.probe.runner import ProbeRequest, run_probe

        request = ProbeRequest(
            plan=plan_request,
            cuda_visible_devices=environ.get("CUDA_VISIBLE_DEVICES"),
            alloc_conf=environ.get("PYTORCH_CUDA_ALLOC_CONF"),
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


ReportFormatOpt = Annotated[
    ReportFormat, typer.Option("--format", help="human, json (versioned) or github (workflow annotations).")
]
StrictOpt = Annotated[bool, typer.Option("--strict", help="Warnings fail too (exit 1).")]
EnvOpt = Annotated[
    list[str] | None,
    typer.Option("--env", metavar="KEY=VALUE", help="Set a variable for the check (over the process and files)."),
]
EnvFileOpt = Annotated[
    list[str] | None, typer.Option("--env-file", metavar="FILE", help="Read KEY=VALUE lines (dotenv style).")
]
NoProcessEnvOpt = Annotated[
    bool, typer.Option("--no-process-env", help="Ignore mmpool's own environment; only --env and --env-file.")
]


def _environment(no_process_env: bool, env_file: list[str] | None, env: list[str] | None):
    from mmpool_cli.environment import assemble

    return assemble(None if no_process_env else os.environ, env_file or [], env or [])


def emit_report(report, fmt: ReportFormat, *, verbose: bool = False, launch: list[str] | None = None, err=False):
    """Print a validate/check report in the chosen format."""
    if fmt is ReportFormat.json:
        from mmpool_cli.output import report_data

        # NOTE: one line: the C encoder is 5x faster than indented output on 1,000-file reports
        typer.echo(json.dumps(report_data(report, launch), ensure_ascii=False), err=err)
    elif fmt is ReportFormat.github:
        from mmpool_cli.output import report_github

        typer.echo(report_github(report), err=err)
    else:
        from rich.console import Console

        from mmpool_cli.render import report_human

        # soft wrap: one finding per line, as a compiler prints them, wrapped by the terminal
        Console(highlight=False, soft_wrap=True, stderr=err).print(report_human(report, verbose))


@app.command()
def validate(
    files: Annotated[list[str], typer.Argument(metavar="FILE...", help="Files to validate; - reads stdin.")],
    kind: Annotated[
        KindChoice, typer.Option("--kind", help="Read every file as this kind (auto: by its top-level keys).")
    ] = KindChoice.auto,
    env: EnvOpt = None,
    env_file: EnvFileOpt = None,
    no_process_env: NoProcessEnvOpt = False,
    output: ReportFormatOpt = ReportFormat.human,
    strict: StrictOpt = False,
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="Show info findings too.")] = False,
) -> None:
    """Validate mmpool configs, SGLang --config files and the environment; report every finding."""
    from mmpool_cli.validate import validate as run_validate

    with reported():
        environ, env_findings = _environment(no_process_env, env_file, env)
    stdin = sys.stdin.buffer.read() if "-" in files else None
    report = run_validate(files, environ, kind=kind.value, stdin=stdin, env_file_findings=env_findings, strict=strict)
    emit_report(report, output, verbose=verbose)
    raise typer.Exit(EXIT_OK if report.ok else EXIT_FINDINGS)


@app.command()
def schema() -> None:
    """Print the JSON Schema of mmpool's config file."""
    from mmpool_cli.config import json_schema

    typer.echo(to_json(json_schema()))


@app.command(context_settings={"allow_interspersed_args": False})
def check(
    command: Annotated[
        list[str], typer.Argument(metavar="-- LAUNCH COMMAND...", help="The SGLang launch command, after --.")
    ],
    exec_: Annotated[
        bool, typer.Option("--exec", help="Run the launch command in mmpool's place when the check passes.")
    ] = False,
    hf_model_type: Annotated[
        str | None,
        typer.Option("--hf-model-type", help="The model's config.json model_type, e.g. qwen3_vl, qwen3_vl_moe."),
    ] = None,
    sm90: Annotated[
        bool | None, typer.Option("--sm90/--no-sm90", help="The GPUs are Hopper (SM 9.0) with CUDA >= 12.3.")
    ] = None,
    gpu_memory: Annotated[
        str | None, typer.Option("--gpu-memory", metavar="SIZE", help="Total memory of the smallest GPU.")
    ] = None,
    feature_size: FeatureOpt = None,
    context_size: ContextOpt = None,
    vmm_granularity: GranularityOpt = "2MiB",
    probe_pidfd: Annotated[
        bool,
        typer.Option("--probe-pidfd/--no-probe-pidfd", help="Test pidfd_getfd rights when IPC needs them."),
    ] = True,
    env: EnvOpt = None,
    env_file: EnvFileOpt = None,
    no_process_env: NoProcessEnvOpt = False,
    output: ReportFormatOpt = ReportFormat.human,
    strict: StrictOpt = False,
) -> None:
    """Check an SGLang launch command and its environment before launch; --exec then runs it."""
    from mmpool_cli.check import Assumptions, check_launch
    from mmpool_cli.models import Report

    with reported():
        if exec_ and (env or env_file or no_process_env):
            raise MmpoolError(
                "--exec runs the launch with mmpool's own environment, so --env, --env-file and "
                "--no-process-env would check a different one: export the variables instead"
            )
        environ, env_findings = _environment(no_process_env, env_file, env)
        assume = Assumptions(
            hf_model_type=hf_model_type,
            sm90=sm90,
            gpu_memory=None if gpu_memory is None else size_arg("--gpu-memory", gpu_memory),
            feature_sizes=tuple(size_arg("--feature-size", s) for s in feature_size or ()),
            context_bytes=None if context_size is None else size_arg("--context-size", context_size),
            vmm_granularity=size_arg("--vmm-granularity", vmm_granularity),
            probe_pidfd=probe_pidfd,
        )
        result = check_launch(command, environ, assume)
    if env_findings:
        from dataclasses import replace

        result = replace(result, findings=env_findings + result.findings)
    report = Report(command="check", results=[result], strict=strict)
    # With --exec the server owns stdout: the report goes to stderr.
    emit_report(report, output, launch=command, err=exec_)
    if not report.ok:
        raise typer.Exit(EXIT_FINDINGS)
    if exec_:
        sys.stdout.flush()
        sys.stderr.flush()
        try:
            os.execvp(command[0], command)
        except OSError as e:
            typer.echo(f"mmpool: error: cannot run {command[0]!r}: {e.strerror or e}", err=True)
            raise typer.Exit(EXIT_USAGE) from None
    raise typer.Exit(EXIT_OK)


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
