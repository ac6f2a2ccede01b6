"""``mmpool cache``'s options: those of SGLang's caches only (a panel of their own in its help), and its own."""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated

import typer

from mmpool_cli.cli.options import SGLANG_PANEL
from mmpool_cli.cli.prefix_options import SGLANG_PREFIX
from mmpool_cli.cli.traffic_options import SourceChoice
from mmpool_cli.core.bounds import MAX_WORKERS
from mmpool_cli.errors import MmpoolError

# the command's flags for SGLang's caches only, with what to do instead under --engine vllm
SGLANG_ONLY = {
    "hidden_size": "vLLM's caches take their sizes from the model's processor",
    "preprocess_mb": "vLLM's processor cache is --mm-processor-cache-gb",
    "workers": "vLLM's API processes are --api-server-count",
    "tp": "vLLM's is --tensor-parallel-size",
    "assume_video": "vLLM's replay sizes images only (--assume-image)",
    "from_format": "vLLM's replay reads OpenAI bodies",
    "plot": "with --engine vllm the curve is in the output (--format json gives every point)",
    **SGLANG_PREFIX,
}


class LogFormat(StrEnum):
    """``--from-format``: the logs whose items carry their data (bench_serving's random images never repeat)."""

    auto = SourceChoice.auto.value
    sglang_log = SourceChoice.sglang_log.value
    openai = SourceChoice.openai.value


HiddenSizeOpt = Annotated[
    int | None,
    typer.Option(
        "--hidden-size",
        metavar="N",
        help="The text model's hidden size (default: --model DIR's config).",
        rich_help_panel=SGLANG_PANEL,
    ),
]

PreprocessMbOpt = Annotated[
    int | None,
    typer.Option(
        "--mm-preprocess-cache-size-mb",
        metavar="MB",
        help="As given to SGLang (default: the processor's own).",
        rich_help_panel=SGLANG_PANEL,
    ),
]

WorkersOpt = Annotated[
    int,
    typer.Option("--workers", metavar="N", help="--tokenizer-worker-num of the server.", rich_help_panel=SGLANG_PANEL),
]

TpOpt = Annotated[
    int,
    typer.Option(
        "--tp", metavar="N", help="--tp-size of the server (the KV cost per rank).", rich_help_panel=SGLANG_PANEL
    ),
]

FromFormatOpt = Annotated[
    LogFormat,
    typer.Option(
        "--from-format",
        help="The --from files' format, as 'trace' and 'simulate' read them (auto: sniffed).",
        rich_help_panel=SGLANG_PANEL,
    ),
]

AssumeVideoOpt = Annotated[
    str | None,
    typer.Option(
        "--assume-video",
        metavar="WxH:SECONDS:FPS",
        help="What http(s) video URLs are taken to be (never fetched); or WxH:FRAMES@FPS.",
        rich_help_panel=SGLANG_PANEL,
    ),
]

PlotOpt = Annotated[
    str | None,
    typer.Option(
        "--plot",
        metavar="FILE",
        help="Draw hits against size (.svg or .png; matplotlib): SGLang's caches, or a recording of either "
        "engine; refused with --engine vllm --from/--trace FILE, whose report holds its curve.",
    ),
]

ExitZeroOpt = Annotated[
    bool,
    typer.Option(
        "--exit-zero",
        envvar="MMPOOL_EXIT_ZERO",
        help="Exit 0 even where a cache is below its target (usage errors stay 2).",
    ),
]

MAX_HIDDEN = 1 << 20  # --hidden-size


def check_sglang_traffic_flags(
    traffic: list[str] | None, trace: str | None, workers: int, tp: int, hidden_size: int | None
) -> None:
    """The bounds ``cache`` and ``tune`` hold the same SGLang flags to: one of --from and --trace, the server's
    workers and TP, --hidden-size. A flag out of bounds raises ``MmpoolError`` (exit 2)."""
    if bool(traffic) == (trace is not None):
        raise MmpoolError("give the traffic: --from FILE (a log; repeat) or --trace FILE, one of the two")
    if not 1 <= workers <= MAX_WORKERS:
        raise MmpoolError(f"--workers {workers}: from 1 to {MAX_WORKERS} tokenizer workers")
    if not 1 <= tp <= MAX_WORKERS:
        raise MmpoolError(f"--tp {tp}: from 1 to {MAX_WORKERS}")
    if hidden_size is not None and not 1 <= hidden_size <= MAX_HIDDEN:
        raise MmpoolError(f"--hidden-size {hidden_size}: from 1 to {MAX_HIDDEN}")
