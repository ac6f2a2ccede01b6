"""Options shared by several commands, declared once, and the typed objects they become."""

from __future__ import annotations

import dataclasses
import functools
import inspect
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Annotated, Any

import typer

from mmpool_cli.core.models import Budget, PlanRequest
from mmpool_cli.core.units import parse_size
from mmpool_cli.errors import MmpoolError, SizeError
from mmpool_cli.sglang import environment as envmod
from mmpool_cli.sglang.rules import DEFAULT_VMM_GRANULARITY


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


class TransportChoice(StrEnum):
    cuda_ipc = "cuda_ipc"
    cuda_vmm = "cuda_vmm"


def size_arg(flag: str, text: str) -> int:
    """Parse a size flag's text, turning a bad size into a usage error (exit 2)."""
    try:
        return parse_size(text)
    except SizeError as e:
        raise MmpoolError(f"{flag}: {e}") from None


FeatureOpt = Annotated[
    list[str] | None,
    typer.Option("--feature-size", metavar="SIZE", help="Bytes of one feature tensor, e.g. 6MiB; repeat for several."),
]
ContextOpt = Annotated[
    str | None,
    typer.Option("--context-size", metavar="SIZE", help="CUDA context per tokenizer process, for the HBM estimate."),
]
GranularityOpt = Annotated[
    str, typer.Option("--vmm-granularity", metavar="SIZE", help="CUDA VMM allocation granularity (cuda_vmm only).")
]
FormatOpt = Annotated[OutputFormat, typer.Option("--format", envvar="MMPOOL_FORMAT", help="Output format.")]
ReportFormatOpt = Annotated[
    ReportFormat,
    typer.Option(
        "--format",
        envvar="MMPOOL_FORMAT",
        help="human, json (versioned), github (workflow annotations) or sarif (SARIF 2.1.0).",
    ),
]
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

    def given(self) -> list[str]:
        """The flags set to something other than their default, as ``--flag-name``."""
        return ["--" + f.name.replace("_", "-") for f in dataclasses.fields(self) if getattr(self, f.name) != f.default]

    def request(self, environ: Mapping[str, str]) -> PlanRequest:
        """The plan request these flags make; an unset ``--size`` is read from ``environ`` as SGLang reads it."""
        launch = envmod.read_launch_env(environ)
        flag = None if self.size is None else Budget(bytes=size_arg("--size", self.size), source="flag")
        granularity = size_arg("--vmm-granularity", self.vmm_granularity)
        if granularity <= 0:
            raise MmpoolError(f"--vmm-granularity: must be positive (default {DEFAULT_VMM_GRANULARITY} bytes)")
        return PlanRequest(
            budget=envmod.resolve_budget(launch, flag=flag),
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
            context_bytes=None if self.context_size is None else size_arg("--context-size", self.context_size),
        )


# The typer declaration of each PoolOptions field (its default comes from the dataclass).
_POOL_DECLARATIONS: dict[str, Any] = {
    "size": Annotated[
        str | None,
        typer.Option(
            "--size",
            metavar="SIZE",
            help="Pool budget for the node, e.g. 1GiB, 512MiB, 2GB. "
            "Default: SGLANG_MM_FEATURE_CACHE_MB as SGLang reads it, else SGLang's 1024 MiB.",
        ),
    ],
    "workers": Annotated[
        int,
        typer.Option(
            "--workers", "--tokenizer-worker-num", metavar="N", help="Tokenizer workers (--tokenizer-worker-num)."
        ),
    ],
    "tp": Annotated[int, typer.Option("--tp", "--tp-size", metavar="N", help="Tensor-parallel size.")],
    "dp": Annotated[int, typer.Option("--dp", "--dp-size", metavar="N", help="Data-parallel size.")],
    "attn_dp_size": Annotated[
        int,
        typer.Option("--attn-dp-size", metavar="N", help="Attention data-parallel size (fewer consumers per feature)."),
    ],
    "enable_dp_attention": Annotated[
        bool, typer.Option("--enable-dp-attention", help="SGLang's deprecated alias for --attn-dp-size <dp-size>.")
    ],
    "transport": Annotated[
        TransportChoice, typer.Option("--transport", "--mm-feature-transport", help="Pool transport.")
    ],
    "vmm_granularity": GranularityOpt,
    "feature_size": FeatureOpt,
    "base_gpu_id": Annotated[
        int, typer.Option("--base-gpu-id", metavar="N", help="GPU that holds the pools (--base-gpu-id).")
    ],
    "context_size": ContextOpt,
}


def with_pool_options(command: Callable[..., None]) -> Callable[..., None]:
    """Give ``command`` the pool flags, declared once here, as one ``pool: PoolOptions`` argument.

    The flags come first in ``--help``, then the command's own options.
    """
    own = [p for p in inspect.signature(command, eval_str=True).parameters.values() if p.name != "pool"]
    flags = [
        inspect.Parameter(
            f.name, inspect.Parameter.KEYWORD_ONLY, default=f.default, annotation=_POOL_DECLARATIONS[f.name]
        )
        for f in dataclasses.fields(PoolOptions)
    ]

    @functools.wraps(command)
    def wrapper(**values: Any) -> None:
        pool = PoolOptions(**{f.name: values.pop(f.name) for f in dataclasses.fields(PoolOptions)})
        command(pool=pool, **values)

    own = [p.replace(kind=inspect.Parameter.KEYWORD_ONLY) for p in own]
    wrapper.__signature__ = inspect.Signature(flags + own)  # type: ignore[attr-defined]
    return wrapper


def environment(no_process_env: bool, env_file: list[str] | None, env: list[str] | None):
    """The environment a command checks: the process's (unless refused), then files, then ``--env``."""
    from mmpool_cli.inputs.envfile import assemble

    return assemble(None if no_process_env else os.environ, env_file or [], env or [])
