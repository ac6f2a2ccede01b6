"""What ``mmpool tune --engine vllm`` runs: the shared ``tune`` command hands its vLLM case here.

The traffic, launch and prefix flags are ``mmpool cache --engine vllm``'s (the same readers: a flag means
the same in both), plus ``tune``'s own ``--budget``, ``--objective`` and ``--points``.
"""

from __future__ import annotations

import dataclasses
import os
from typing import TYPE_CHECKING

from mmpool_cli.cli.cache_options import SGLANG_ONLY
from mmpool_cli.cli.prefix_options import VLLM_PREFIX, vllm_prefix_flags
from mmpool_cli.cli.traffic_options import image_size
from mmpool_cli.cli.vllm_options import VllmOptions
from mmpool_cli.errors import MmpoolError

if TYPE_CHECKING:
    from mmpool_cli.tune.split import TuneReport

# tune's flags that mean nothing to vLLM's split (cache's SGLang panel, and tune's own), with what to give instead
_SGLANG_TUNE = {
    **{name: why for name, why in SGLANG_ONLY.items() if name != "plot"},  # tune draws either engine's report
    "trace_file": "vLLM's split reads OpenAI bodies (--from), whose prompts its block cache replays",
}
VLLM_ONLY = {"window", *VLLM_PREFIX, *(f.name for f in dataclasses.fields(VllmOptions) if f.name != "gpu_name")}


def refuse_other_engine(engine_name: str, given: dict[str, str]) -> None:
    """A usage error for a flag of the engine not chosen (one line, naming what to give instead)."""
    for name, flag in given.items():
        if engine_name == "vllm" and name in _SGLANG_TUNE:
            raise MmpoolError(f"{flag} is for --engine sglang: {_SGLANG_TUNE[name]}")
        if engine_name != "vllm" and name in VLLM_PREFIX:
            raise MmpoolError(f"{flag} is a vLLM flag ({VLLM_PREFIX[name]}): add --engine vllm")
        if engine_name != "vllm" and name in VLLM_ONLY:
            raise MmpoolError(f"{flag} is a vLLM flag: add --engine vllm")


def run(
    model: str | None,
    files: list[str],
    vllm: VllmOptions,
    *,
    assume_image: str | None,
    window: int,
    prefix: tuple[bool, int | None, int | None, str | None],
    budget: str | None,
    objective: str,
    points: int,
) -> TuneReport:
    """vLLM's split over ``files``: the request ``cache --engine vllm`` would build, then every candidate scored."""
    from mmpool_cli.cli.options import size_arg
    from mmpool_cli.usecases import tune_vllm
    from mmpool_cli.workload.hf import resolve

    if model is None:
        raise MmpoolError("--model DIR is needed: its processor sizes the items, its config.json the KV blocks")
    flags = vllm_prefix_flags(*prefix, model)
    budget_bytes = None if budget is None else size_arg("--budget", budget)
    if budget_bytes is not None and budget_bytes <= 0:
        raise MmpoolError(f"--budget {budget}: a size above 0, e.g. 20GiB")
    request = vllm.request(os.environ, resolve(model), ())
    assumed = None if assume_image is None else image_size("--assume-image", assume_image)
    req = tune_vllm.tune_request(
        files,
        request,
        flags,
        assume_image=assumed,
        window=window,
        budget_bytes=budget_bytes,
        budget_text=budget,
        objective=objective,
        points=points,
        environ=os.environ,
    )
    return tune_vllm.tune(req)
