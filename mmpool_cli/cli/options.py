"""Options shared by several commands, declared once, and the typed objects they become."""

from __future__ import annotations

import dataclasses
import functools
import inspect
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING, Annotated, Any

import typer

from mmpool_cli.core.bounds import (
    MAX_GRANULARITY,
    MAX_IDLE_TIMEOUT_S,
    MAX_PARALLEL,
    MAX_WORKERS,
    MIN_CONTEXT,
    MIN_GRANULARITY,
    context_problem,
    count_problem,
    granularity_problem,
    largest_gpu,
)
from mmpool_cli.core.excerpt import excerpt, shorten
from mmpool_cli.core.units import MAX_BYTES, format_binary, parse_int, parse_size
from mmpool_cli.engines.sglang import env_vars as envmod
from mmpool_cli.engines.sglang.models import Budget, PlanRequest
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


@dataclass(frozen=True)
class PoolOptions:
    """The pool flags of ``plan`` and ``probe``, as given; the field defaults are the flags' defaults."""

    size: str | None = None
    workers: int = 1
    tp: int = 1
    dp: int = 1
    attn_dp_size: int = 1
    enable_dp_attention: bool = False
    transport: TransportChoice = TransportChoice.cuda_ipc
    vmm_granularity: str = "2MiB"
    feature_size: list[str] | None = None
    base_gpu_id: int = 0
    context_size: str | None = None
    sglang_version: str | None = None

    def given(self) -> list[str]:
        """The flags set to something other than their default, as ``--flag-name``."""
        return ["--" + f.name.replace("_", "-") for f in dataclasses.fields(self) if getattr(self, f.name) != f.default]

    def request(self, environ: Mapping[str, str]) -> PlanRequest:
        """The plan request these flags make; an unset ``--size`` is read from ``environ`` as SGLang reads it."""
        launch = envmod.read_launch_env(environ)
        flag = None if self.size is None else Budget(bytes=size_arg("--size", self.size), source="flag")
        granularity = granularity_arg(self.vmm_granularity)
        version, chosen = sglang_release(self.sglang_version, environ)
        return PlanRequest(
            budget=envmod.resolve_budget(launch, flag=flag),
            vlm_cache=launch.vlm_cache if launch.vlm_cache.variable else None,
            workers=self.workers,
            tp_size=self.tp,
            dp_size=self.dp,
            attn_dp_size=self.attn_dp_size,
            enable_dp_attention=self.enable_dp_attention,
            transport=self.transport.value,
            vmm_granularity=granularity,
            feature_sizes=tuple(size_arg("--feature-size", s) for s in self.feature_size or ()),
            base_gpu_id=self.base_gpu_id,
            expandable_segments=launch.expandable_segments,
            context_bytes=None if self.context_size is None else context_arg(self.context_size),
            sglang_version=version,
            sglang_version_chosen=chosen,
        )


def sglang_release(flag: str | None, environ: Mapping[str, str]) -> tuple[str, str]:
    """The SGLang release to apply and how it was chosen; an unknown one is a usage error (exit 2)."""
    from mmpool_cli.engines.sglang.versions import choose

    release, chosen = choose(flag, environ)
    return release.version, chosen


# The typer declaration of each PoolOptions field (its default comes from the dataclass).
_POOL_DECLARATIONS: dict[str, Any] = {
    "size": Annotated[
        str | None,
        typer.Option(
            *FLAGS["budget"],
            metavar="SIZE",
            help="Pool budget for the node, e.g. 1GiB, 512MiB, 2GB. "
            "Default: SGLANG_MM_FEATURE_CACHE_MB as SGLang reads it, else SGLang's 1024 MiB. "
            f"More than {largest_gpu()} is more than any GPU has: an error.",
        ),
    ],
    "workers": Annotated[
        int,
        typer.Option(
            *FLAGS["workers"],
            parser=bounded_int(MAX_WORKERS, "tokenizer workers"),
            metavar="N",
            help=f"Tokenizer workers (--tokenizer-worker-num), at most {MAX_WORKERS}; below 1 is SGLang's error.",
        ),
    ],
    "tp": Annotated[
        int,
        typer.Option(
            *FLAGS["tp_size"],
            parser=bounded_int(MAX_PARALLEL, "ranks"),
            metavar="N",
            help="Tensor-parallel size, at most 4096.",
        ),
    ],
    "dp": Annotated[
        int,
        typer.Option(
            *FLAGS["dp_size"],
            parser=bounded_int(MAX_PARALLEL, "ranks"),
            metavar="N",
            help="Data-parallel size, at most 4096.",
        ),
    ],
    "attn_dp_size": Annotated[
        int,
        typer.Option(
            *FLAGS["attn_dp_size"],
            parser=bounded_int(MAX_PARALLEL, "ranks"),
            metavar="N",
            help="Attention data-parallel size (fewer consumers per feature).",
        ),
    ],
    "enable_dp_attention": Annotated[
        bool,
        typer.Option(*FLAGS["enable_dp_attention"], help="SGLang's deprecated alias for --attn-dp-size <dp-size>."),
    ],
    "transport": Annotated[TransportChoice, typer.Option(*FLAGS["transport"], help="Pool transport.")],
    "vmm_granularity": GranularityOpt,
    "feature_size": FeatureOpt,
    "base_gpu_id": Annotated[
        int,
        typer.Option(
            *FLAGS["base_gpu_id"],
            parser=bounded_int(MAX_PARALLEL, "ranks"),
            metavar="N",
            help="GPU that holds the pools (--base-gpu-id); below 0 is SGLang's error.",
        ),
    ],
    "context_size": ContextOpt,
    "sglang_version": SglangVersionOpt,
}


def with_options(
    cls: type, declarations: dict[str, Any], argument: str
) -> Callable[[Callable[..., None]], Callable[..., None]]:
    """A decorator giving a command the flags of dataclass ``cls`` as one ``argument: cls`` parameter.

    The flags come before the command's own options in ``--help``.
    """

    def decorate(command: Callable[..., None]) -> Callable[..., None]:
        params = inspect.signature(command, eval_str=True).parameters.values()
        own = [p.replace(kind=inspect.Parameter.KEYWORD_ONLY) for p in params if p.name != argument]
        names = [f.name for f in dataclasses.fields(cls)]
        flags = [
            inspect.Parameter(
                f.name, inspect.Parameter.KEYWORD_ONLY, default=f.default, annotation=declarations[f.name]
            )
            for f in dataclasses.fields(cls)
        ]

        @functools.wraps(command)
        def wrapper(**values: Any) -> None:
            options = cls(**{name: values.pop(name) for name in names})
            command(**{argument: options}, **values)

        wrapper.__signature__ = inspect.Signature(flags + own)  # type: ignore[attr-defined]
        return wrapper

    return decorate


def with_pool_options(command: Callable[..., None]) -> Callable[..., None]:
    """Give ``command`` the pool flags, declared once here, as one ``pool: PoolOptions`` argument."""
    return with_options(PoolOptions, _POOL_DECLARATIONS, "pool")(command)


def environment(
    no_process_env: bool, env_file: list[str] | None, env: list[str] | None
) -> tuple[Environment, list[Finding]]:
    """The environment a command checks: the process's (unless refused), then files, then ``--env``."""
    from mmpool_cli.inputs.dotenv import assemble

    return assemble(None if no_process_env else os.environ, env_file or [], env or [])
