"""Options shared by several commands, declared once, and the typed objects they become."""

from __future__ import annotations

import dataclasses
import functools
import inspect
import os
from collections.abc import Callable, Mapping
from enum import StrEnum
from typing import TYPE_CHECKING, Annotated, Any

import typer
import typer.core

from mmpool_cli.core.bounds import (
    MAX_GRANULARITY,
    MAX_IDLE_TIMEOUT_S,
    MIN_CONTEXT,
    MIN_GRANULARITY,
    context_problem,
    count_problem,
    gpu_id_problem,
    granularity_problem,
    largest_gpu,
)
from mmpool_cli.core.excerpt import excerpt, shorten
from mmpool_cli.core.units import MAX_BYTES, format_binary, parse_int, parse_size
from mmpool_cli.engines.sglang.settings import SETTINGS
from mmpool_cli.errors import MmpoolError, SizeError

if TYPE_CHECKING:
    from mmpool_cli.core.findings import Finding
    from mmpool_cli.inputs.dotenv import Environment

# Each pool setting's flags, declared once (engines/sglang/settings.py).
FLAGS = {s.subject: s.flags for s in SETTINGS}


class OutputFormat(StrEnum):
    human = "human"
    json = "json"


class ReportFormat(StrEnum):
    human = "human"
    json = "json"
    github = "github"
    sarif = "sarif"


class KindChoice(StrEnum):
    auto = "auto"
    mmpool = "mmpool"
    sglang = "sglang"
    vllm = "vllm"


class EngineChoice(StrEnum):
    sglang = "sglang"
    vllm = "vllm"


EngineOpt = Annotated[EngineChoice, typer.Option("--engine", help="The inference engine: sglang or vllm.")]
# a command that models SGLang's pools only: its help offers sglang, and --engine vllm is refused with
# what to run instead (only_sglang), not with click's list of choices
SglangOnlyEngineOpt = Annotated[
    EngineChoice,
    typer.Option(
        "--engine",
        metavar="sglang",
        help="The inference engine: sglang only (vLLM's multimodal memory: 'mmpool plan --engine vllm').",
    ),
]
SGLANG_PANEL = "SGLang only (--engine sglang)"


class PanelledCommand(typer.core.TyperCommand):
    """A command whose options that one engine alone takes are listed apart, each panel under its title.

    typer's plain help (mmpool's: no rich markup) ignores ``rich_help_panel``: here the options of no
    panel come first, then each panel's, in the order of their first option.
    """

    def format_options(self, ctx: Any, formatter: Any) -> None:
        sections: dict[str, list[tuple[str, str]]] = {"Arguments": [], "Options": []}
        for param in self.get_params(ctx):
            record = param.get_help_record(ctx)
            if record is None:
                continue
            panel = getattr(param, "rich_help_panel", None)
            title = "Arguments" if param.param_type_name == "argument" else panel or "Options"
            sections.setdefault(title, []).append(record)
        for title, records in sections.items():
            if records:
                with formatter.section(title):
                    formatter.write_dl(records)


def only_sglang(engine: EngineChoice, command: str) -> None:
    """A usage error for an engine whose pools ``command`` cannot model, with what to run instead."""
    if engine is not EngineChoice.sglang:
        from mmpool_cli.engines import engine as get_engine

        reason = get_engine(engine.value).simulation_refusal(get_engine(engine.value).releases()[-1], "")
        raise MmpoolError(f"mmpool {command} models SGLang's feature pools only: {reason}")


class TransportChoice(StrEnum):
    cuda_ipc = "cuda_ipc"
    cuda_vmm = "cuda_vmm"


def size_arg(flag: str, text: str) -> int:
    """Parse a size flag's text, turning a bad size into a usage error (exit 2)."""
    try:
        return parse_size(text)
    except SizeError as e:
        raise MmpoolError(f"{flag}: {e}") from None


def int_arg(text: str) -> int:
    """An integer flag's text as click reads it, but a 64-bit bound and a short quote when it is huge."""
    try:
        value = parse_int(text)
    except ValueError as e:
        raise typer.BadParameter(str(e)) from None
    if abs(value) > MAX_BYTES:
        raise typer.BadParameter(f"{shorten(text)} is beyond the 64-bit integers SGLang, torch and CUDA use")
    return value


def gpu_id_arg(text: str) -> int:
    """``--base-gpu-id``: ``int_arg`` up to the largest GPU id a node has (a usage error above it)."""
    value = int_arg(text)
    if problem := gpu_id_problem(value):
        raise typer.BadParameter(problem)
    return value


def bounded_int(limit: int, what: str) -> Callable[[str], int]:
    """``int_arg`` with an upper bound (a usage error above it): the most a deployment can have."""

    def parse(text: str) -> int:
        value = int_arg(text)
        problem = count_problem(value, limit, what)
        if problem:
            raise typer.BadParameter(problem)
        return value

    return parse


def granularity_arg(text: str) -> int:
    """``--vmm-granularity``: a size that is a power of two CUDA could use (else a usage error)."""
    nbytes = size_arg("--vmm-granularity", text)
    problem = granularity_problem(nbytes)
    if problem:
        raise MmpoolError(f"--vmm-granularity: {problem}")
    return nbytes


def context_arg(text: str) -> int:
    """``--context-size``: a size one CUDA context could take (else a usage error)."""
    nbytes = size_arg("--context-size", text)
    problem = context_problem(nbytes)
    if problem:
        raise MmpoolError(f"--context-size: {problem}")
    return nbytes


FeatureOpt = Annotated[
    list[str] | None,
    typer.Option(
        *FLAGS["feature_sizes"], metavar="SIZE", help="Bytes of one feature tensor, e.g. 6MiB; repeat for several."
    ),
]
ContextOpt = Annotated[
    str | None,
    typer.Option(
        *FLAGS["context_bytes"],
        metavar="SIZE",
        help=f"CUDA context per tokenizer process, for the HBM estimate: {format_binary(MIN_CONTEXT)} to "
        f"{largest_gpu()}.",
    ),
]
GranularityOpt = Annotated[
    str,
    typer.Option(
        *FLAGS["vmm_granularity"],
        metavar="SIZE",
        help=f"CUDA VMM allocation granularity (cuda_vmm only): a power of two from {format_binary(MIN_GRANULARITY)} "
        f"to {format_binary(MAX_GRANULARITY)}.",
    ),
]


def format_twin(choices: type[StrEnum]) -> dict[str, Any]:
    """``--format``'s declaration for a command printing ``choices``, and its twin ``MMPOOL_FORMAT``.

    The twin is shared: set for ``validate`` in a CI job (``MMPOOL_FORMAT=github``) it reaches
    ``plan`` too, where it means nothing. There it is ignored, said once on stderr, never an
    error; a value no command takes stays a usage error naming the variable, and on the command
    line only the command's own formats are accepted.
    """
    names = [c.value for c in choices]
    everywhere = [c.value for c in ReportFormat]

    def callback(ctx: typer.Context, param: typer.CallbackParam, value: str) -> StrEnum:
        if value in names:
            return choices(value)
        # typer carries its own click: its ParameterSource is compared by name
        from_env = getattr(ctx.get_parameter_source(param.name or ""), "name", None) == "ENVIRONMENT"
        if from_env and value in everywhere:
            typer.echo(
                f"mmpool: note: ignoring MMPOOL_FORMAT={value}: mmpool {ctx.info_name} prints {' or '.join(names)}",
                err=True,
            )
            return choices(names[0])
        if from_env:
            raise typer.BadParameter(
                f"MMPOOL_FORMAT={excerpt(value)} is not a format of any mmpool command ({', '.join(everywhere)}); "
                "fix or unset it"
            )
        raise typer.BadParameter(f"{excerpt(value)} is not one of {', '.join(repr(n) for n in names)}.")

    def complete(incomplete: str) -> list[str]:
        return [n for n in names if n.startswith(incomplete)]

    return {
        "envvar": "MMPOOL_FORMAT",
        "metavar": f"<{'|'.join(names)}>",
        "callback": callback,
        "autocompletion": complete,
    }


def told(ctx: typer.Context) -> dict[str, str]:
    """The options the user gave (on the command line or through an environment twin): name -> its first flag.

    An option left at its default is not among them, though written out at that default is.
    """
    given = {}
    for param in ctx.command.params:
        source = getattr(ctx.get_parameter_source(param.name or ""), "name", None)
        if param.name and source in ("COMMANDLINE", "ENVIRONMENT") and param.opts:
            given[param.name] = param.opts[0]
    return given


def spelled(ctx: typer.Context, name: str, flag: str, variable: str) -> str:
    """How the user set option ``name``: its flag, or its environment twin with the value it holds."""
    if getattr(ctx.get_parameter_source(name), "name", None) == "ENVIRONMENT":
        return f"{variable}={shorten(os.environ.get(variable, ''))} (the environment twin of {flag})"
    return flag


if TYPE_CHECKING:  # the callback of format_twin gives the command the enum member
    FormatOpt = OutputFormat
    ReportFormatOpt = ReportFormat
else:
    FormatOpt = Annotated[str, typer.Option("--format", help="Output format.", **format_twin(OutputFormat))]
    ReportFormatOpt = Annotated[
        str,
        typer.Option(
            "--format",
            help="human, json (versioned), github (workflow annotations) or sarif (SARIF 2.1.0).",
            **format_twin(ReportFormat),
        ),
    ]
VerboseOpt = Annotated[bool, typer.Option("--verbose", "-v", help="Human output: show info findings too.")]
StrictOpt = Annotated[bool, typer.Option("--strict", envvar="MMPOOL_STRICT", help="Warnings fail too (exit 1).")]
QuietOpt = Annotated[
    bool, typer.Option("--quiet", "-q", envvar="MMPOOL_QUIET", help="Human output: only warning and error lines.")
]
ExitZeroOpt = Annotated[
    bool,
    typer.Option("--exit-zero", envvar="MMPOOL_EXIT_ZERO", help="Exit 0 even with findings (usage errors stay 2)."),
]
EnvOpt = Annotated[
    list[str] | None,
    typer.Option("--env", metavar="KEY=VALUE", help="Set a variable for the check (over the process and files)."),
]
EnvFileOpt = Annotated[
    list[str] | None, typer.Option("--env-file", metavar="FILE", help="Read KEY=VALUE lines (dotenv style).")
]
SglangVersionOpt = Annotated[
    str | None,
    typer.Option(
        "--sglang-version",
        metavar="X.Y.Z",
        help="The SGLang release whose flags and pool rules apply (0.5.10 or later). Default: "
        "$MMPOOL_SGLANG_VERSION, else the installed sglang, else the newest mmpool knows.",
    ),
]
IdleTimeoutOpt = Annotated[
    float,
    typer.Option(
        "--idle-timeout", metavar="SECONDS", help="Give up on a silent pipe (- reads stdin) after this many seconds."
    ),
]


def check_idle_timeout(seconds: float) -> None:
    """``--idle-timeout`` takes the bounds of every command that reads a pipe (NaN fails them too)."""
    if not 0 < seconds <= MAX_IDLE_TIMEOUT_S:
        raise MmpoolError(f"--idle-timeout: expected seconds above 0 and up to {MAX_IDLE_TIMEOUT_S}, not {seconds}")


NoProcessEnvOpt = Annotated[
    bool, typer.Option("--no-process-env", help="Ignore mmpool's own environment; only --env and --env-file.")
]


def sglang_release(flag: str | None, environ: Mapping[str, str]) -> tuple[str, str]:
    """The SGLang release to apply and how it was chosen; an unknown one is a usage error (exit 2)."""
    from mmpool_cli.engines.sglang.versions import choose

    release, chosen = choose(flag, environ)
    return release.version, chosen


def with_options(
    cls: type, declarations: dict[str, Any], argument: str, skip: tuple[str, ...] = ()
) -> Callable[[Callable[..., None]], Callable[..., None]]:
    """A decorator giving a command the flags of dataclass ``cls`` as one ``argument: cls`` parameter.

    The flags come before the command's own options in ``--help``. The fields in ``skip`` get no flag
    (they keep their default): the command declares that option itself.
    """

    def decorate(command: Callable[..., None]) -> Callable[..., None]:
        params = inspect.signature(command, eval_str=True).parameters.values()
        own = [p.replace(kind=inspect.Parameter.KEYWORD_ONLY) for p in params if p.name != argument]
        names = [f.name for f in dataclasses.fields(cls) if f.name not in skip]
        flags = [
            inspect.Parameter(
                f.name, inspect.Parameter.KEYWORD_ONLY, default=f.default, annotation=declarations[f.name]
            )
            for f in dataclasses.fields(cls)
            if f.name not in skip
        ]

        @functools.wraps(command)
        def wrapper(**values: Any) -> None:
            options = cls(**{name: values.pop(name) for name in names})
            command(**{argument: options}, **values)

        wrapper.__signature__ = inspect.Signature(flags + own)  # type: ignore[attr-defined]
        return wrapper

    return decorate


def environment(
    no_process_env: bool, env_file: list[str] | None, env: list[str] | None
) -> tuple[Environment, list[Finding]]:
    """The environment a command checks: the process's (unless refused), then files, then ``--env``."""
    from mmpool_cli.inputs.dotenv import assemble

    return assemble(None if no_process_env else os.environ, env_file or [], env or [])


def check_plot(path: str) -> None:
    """Refuse a --plot FILE whose format cannot be drawn, or drawn here (no matplotlib), before any work."""
    suffix = os.path.splitext(path)[1].lower()
    if suffix not in (".svg", ".png"):
        raise MmpoolError(f"--plot {path}: the file name must end in .svg or .png (the format is taken from it)")
    import importlib.util

    if importlib.util.find_spec("matplotlib") is None:
        raise MmpoolError(
            "--plot needs matplotlib: pip install matplotlib (or, from an mmpool checkout, pip install '.[plot]')"
        )
