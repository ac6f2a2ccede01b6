"""The pool flags of ``plan``, ``probe`` and ``simulate``, declared once, and the plan request they make."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from typing import Annotated, Any

import typer

from mmpool_cli.cli.options import (
    FLAGS,
    ContextOpt,
    FeatureOpt,
    GranularityOpt,
    SglangVersionOpt,
    TransportChoice,
    bounded_int,
    context_arg,
    gpu_id_arg,
    granularity_arg,
    sglang_release,
    size_arg,
    with_options,
)
from mmpool_cli.core.bounds import MAX_PARALLEL, MAX_WORKERS, largest_gpu
from mmpool_cli.engines.sglang import env_vars as envmod
from mmpool_cli.engines.sglang.models import Budget, PlanRequest
from mmpool_cli.errors import MmpoolError


@dataclass(frozen=True)
class PoolOptions:
    """The pool flags of ``plan`` and ``probe``, as given; the field defaults are the flags' defaults."""

    size: str | None = None
    workers: int = 1
    tp: int = 1
    dp: int = 1
    attn_dp_size: int = 1
    enable_dp_attention: bool = False
    transport: TransportChoice | None = None  # cuda_ipc, said to be an opt-in where SGLang's default is cpu
    vmm_granularity: str = "2MiB"
    feature_size: list[str] | None = None
    base_gpu_id: int = 0
    context_size: str | None = None
    sglang_version: str | None = None

    def given(self) -> list[str]:
        """The flags set to something other than their default, as ``--flag-name``."""
        return ["--" + f.name.replace("_", "-") for f in dataclasses.fields(self) if getattr(self, f.name) != f.default]

    def request(self, environ: Mapping[str, str], told: Collection[str] = ()) -> PlanRequest:
        """The plan request these flags make; an unset ``--size`` is read from ``environ`` as SGLang reads it.

        ``told``: the fields the user gave (``options.told``); ``--vmm-granularity`` given for another
        transport than cuda_vmm, which has no granularity, is refused rather than ignored.
        """
        launch = envmod.read_launch_env(environ)
        flag = None if self.size is None else Budget(bytes=size_arg("--size", self.size), source="flag")
        granularity = granularity_arg(self.vmm_granularity)
        transport = self.transport or TransportChoice.cuda_ipc
        if "vmm_granularity" in told and transport is not TransportChoice.cuda_vmm:
            raise MmpoolError(
                f"--vmm-granularity sizes cuda_vmm's allocations; the {transport.value} transport has no "
                "granularity: drop it, or add --transport cuda_vmm"
            )
        version, chosen = sglang_release(self.sglang_version, environ)
        return PlanRequest(
            budget=envmod.resolve_budget(launch, flag=flag),
            vlm_cache=launch.vlm_cache if launch.vlm_cache.variable else None,
            workers=self.workers,
            tp_size=self.tp,
            dp_size=self.dp,
            attn_dp_size=self.attn_dp_size,
            enable_dp_attention=self.enable_dp_attention,
            transport=transport.value,
            transport_asked=self.transport is not None,
            legacy_transport=launch.legacy_transport_on if launch.legacy_transport_set else None,
            vmm_granularity=granularity,
            feature_sizes=tuple(size_arg("--feature-size", s) for s in self.feature_size or ()),
            base_gpu_id=self.base_gpu_id,
            expandable_segments=launch.expandable_segments,
            context_bytes=None if self.context_size is None else context_arg(self.context_size),
            sglang_version=version,
            sglang_version_chosen=chosen,
        )


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
    "transport": Annotated[
        TransportChoice | None,
        typer.Option(
            *FLAGS["transport"],
            help="Pool transport (--mm-feature-transport)  [default: cuda_ipc; SGLang itself picks cpu unless asked]",
        ),
    ],
    "vmm_granularity": GranularityOpt,
    "feature_size": FeatureOpt,
    "base_gpu_id": Annotated[
        int,
        typer.Option(
            *FLAGS["base_gpu_id"],
            parser=gpu_id_arg,
            metavar="N",
            help="GPU that holds the pools (--base-gpu-id); below 0 is SGLang's error.",
        ),
    ],
    "context_size": ContextOpt,
    "sglang_version": SglangVersionOpt,
}


def with_pool_options(command: Callable[..., None]) -> Callable[..., None]:
    """Give ``command`` the pool flags, declared once here, as one ``pool: PoolOptions`` argument."""
    return with_options(PoolOptions, _POOL_DECLARATIONS, "pool")(command)
