"""What ``mmpool cache --engine vllm`` runs: the shared ``cache`` command hands its vLLM case here.

The command's own options (``--model``, ``--from FILE…``, ``--format``) plus the vLLM launch flags of
``plan --engine vllm`` (``with_vllm_options``: the same reader, so a flag means the same in every
command), ``--assume-image`` and ``--encoder-window``.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from fractions import Fraction
from typing import TYPE_CHECKING, Annotated

import typer

from mmpool_cli.cli.app import emit, reported
from mmpool_cli.cli.options import OutputFormat
from mmpool_cli.cli.progress import counting
from mmpool_cli.cli.traffic_options import image_size
from mmpool_cli.cli.vllm_options import PANEL, VllmOptions
from mmpool_cli.errors import MmpoolError
from mmpool_cli.render import render

if TYPE_CHECKING:
    from mmpool_cli.engines.vllm.prefix import PrefixFlags

EncoderWindowOpt = Annotated[
    int,
    typer.Option(
        "--encoder-window",
        metavar="N",
        help="vLLM: requests assumed to hold encoder-cache entries at once (their prefills overlap); default 1.",
        rich_help_panel=PANEL,
    ),
]


def run(
    model: str | None,
    files: Sequence[str],
    vllm: VllmOptions,
    output: OutputFormat,
    *,
    assume_image: str | None = None,
    window: int = 1,
    trace: tuple[str, Iterable[tuple[str, str, str | None, int]]] | None = None,
    target: Fraction = Fraction(99),
    flags: PrefixFlags | None = None,
) -> bool:
    """Replay vLLM's processor and encoder caches over ``files`` (or ``trace``: a trace file's name and its
    items ``(request, kind, key, pixel bytes)``) and print the report: exit 0 where every cache meets its
    target at the deployment's size (``target`` percent of the hits of a processor cache that never evicts;
    no encoder wait): returns whether every cache does."""
    from mmpool_cli.usecases.cache_vllm import vllm_caches
    from mmpool_cli.workload.hf import resolve

    with reported():
        if model is None:
            raise MmpoolError("--model NAME|PATH is needed: the model's processor decides every item's bytes")
        request = vllm.request(os.environ, resolve(model), ())
        assumed = None if assume_image is None else image_size("--assume-image", assume_image)
        with counting("cache", "replaying vLLM's caches") as show:
            done = [0]

            def tick() -> None:
                done[0] += 1
                show(done[0])

            report = vllm_caches(
                files,
                request,
                assume_image=assumed,
                window=window,
                progress=tick,
                trace=trace,
                target=target,
                flags=flags,
            )
    emit(render("vllm-caches", output.value, report))
    return all(c["meets_target"] for c in report["caches"])
