"""``mmpool tune``: one split of the GPU's memory between the KV cache, the embedding cache and the pool."""

from __future__ import annotations

import dataclasses
import os
from enum import StrEnum
from typing import TYPE_CHECKING, Annotated, NoReturn

import typer

from mmpool_cli.cli.app import app, emit, epilog, reported
from mmpool_cli.cli.cache_options import (
    AssumeVideoOpt,
    FromFormatOpt,
    HiddenSizeOpt,
    LogFormat,
    TpOpt,
    WorkersOpt,
    check_sglang_traffic_flags,
)
from mmpool_cli.cli.cache_vllm import EncoderWindowOpt
from mmpool_cli.cli.options import FormatOpt, OutputFormat, PanelledCommand, check_plot, told
from mmpool_cli.cli.prefix_options import (
    BlockSizeOpt,
    DisableRadixOpt,
    GpuBlocksOpt,
    MaxTotalTokensOpt,
    NoPrefixCachingOpt,
    PageSizeOpt,
    TokenizerOpt,
    TokenizerPathOpt,
    prefix_options,
)
from mmpool_cli.cli.traffic_options import DEFAULT_RECV_DELAY, AssumeImageOpt, SourceChoice, convert
from mmpool_cli.cli.vllm_options import VllmOptions, with_vllm_options_sharing
from mmpool_cli.errors import EXIT_BELOW_TARGET, EXIT_OK, MmpoolError

if TYPE_CHECKING:
    from mmpool_cli.inputs.traffic.cache_request import PrefixOptions
    from mmpool_cli.tune.split import TuneReport
    from mmpool_cli.usecases.tune import TuneQuery

MAX_POINTS = 32  # settings per memory: the grid's rows are about their product, each scored
MAX_EVENTS = 10_000_000  # a --trace's events, as simulate --trace takes them by default (its --max-events)
IDLE_TIMEOUT = 30.0  # seconds a --trace read from a pipe may stay silent, as simulate's --idle-timeout


ExitZeroOpt = Annotated[
    bool,
    typer.Option(
        "--exit-zero",
        envvar="MMPOOL_EXIT_ZERO",
        help="Exit 0 even where a split does better than today's launch (usage errors stay 2).",
    ),
]


class Objective(StrEnum):
    """``--objective``: what the recommended split is best at (docs/tune.md)."""

    no_fallback = "no-fallback"
    least_work = "least-work"
    most_kv = "most-kv"


@app.command(
    cls=PanelledCommand,
    short_help="Divide the GPU between the KV cache, the embedding cache and the pool, from real traffic.",
    epilog=epilog(
        [
            "mmpool tune --model examples/qwen2.5-vl-7b --from examples/traffic/chats.jsonl --max-total-tokens 2048",
            "mmpool tune --model /models/Qwen2.5-VL-7B-Instruct --from server.log --budget 20GiB --format json",
            "mmpool tune --model /models/Qwen2.5-VL-7B-Instruct --trace prod.jsonl --workers 2 --budget 2GiB",
            "mmpool tune --engine vllm --model /models/Qwen2.5-VL-7B-Instruct --from bodies.jsonl "
            "--num-gpu-blocks-override 30000",
        ],
        "0 today's launch is as good as the recommended split under the objective (or it is not scored: its pool "
        "and embedding cache leave no KV token of --budget, or vLLM's launch gives no --num-gpu-blocks-override); 1 "
        "a split does better (the report is printed, its JSON status 'fail'; --exit-zero makes it 0); 2 usage error, "
        "or input that cannot be sized (nothing on stdout); 70 internal error.",
    ),
)
@with_vllm_options_sharing("gpu_name")
def tune(
    ctx: typer.Context,
    vllm: VllmOptions,
    model: Annotated[
        str | None, typer.Option("--model", metavar="NAME|PATH", help="A model directory (its KV bytes per token).")
    ] = None,
    traffic: Annotated[
        list[str] | None,
        typer.Option("--from", metavar="FILE", help="A server log or OpenAI body log (as 'mmpool trace'); repeat."),
    ] = None,
    trace_file: Annotated[
        str | None,
        typer.Option(
            "--trace",
            metavar="FILE",
            help="A trace of 'mmpool trace' (with its items' keys; no prompts: no radix cache).",
        ),
    ] = None,
    budget: Annotated[
        str | None,
        typer.Option(
            "--budget",
            metavar="SIZE",
            help="The GPU memory per rank to divide, e.g. 20GiB (default: today's launch's: --max-total-tokens "
            "tokens of KV, the pool and the embedding cache; vLLM's: --num-gpu-blocks-override blocks, the encoder "
            "cache and the decode pool).",
        ),
    ] = None,
    objective: Annotated[
        Objective,
        typer.Option(
            "--objective",
            help="What the recommended split is best at: no-fallback (no feature falls back, then the least prefill "
            "+ encoder work), least-work (the least work, then the fewest fallbacks), most-kv (the most KV tokens).",
        ),
    ] = Objective.no_fallback,
    points: Annotated[
        int,
        typer.Option("--points", metavar="N", help=f"Settings per memory in the grid of splits (2 to {MAX_POINTS})."),
    ] = 8,
    engine_name: Annotated[
        str, typer.Option("--engine", metavar="NAME", help="The engine: sglang or vllm.")
    ] = "sglang",
    hidden_size: HiddenSizeOpt = None,
    workers: WorkersOpt = 1,
    tp: TpOpt = 1,
    from_format: FromFormatOpt = LogFormat.auto,
    gpu_name: Annotated[
        str | None,
        typer.Option(
            "--gpu-name",
            metavar="NAME",
            help="The GPU that serves it (SGLang's Qwen3-VL default, vLLM's token defaults).",
        ),
    ] = None,
    assume_image: AssumeImageOpt = None,
    assume_video: AssumeVideoOpt = None,
    max_total_tokens: MaxTotalTokensOpt = None,
    disable_radix_cache: DisableRadixOpt = False,
    page_size: PageSizeOpt = 1,
    tokenizer_path: TokenizerPathOpt = None,
    plot: Annotated[
        str | None,
        typer.Option(
            "--plot",
            metavar="FILE",
            help="Draw every split's work per request against its KV tokens, the front, today's launch and the "
            "recommendation (.svg or .png; matplotlib).",
        ),
    ] = None,
    window: EncoderWindowOpt = 1,
    no_prefix_caching: NoPrefixCachingOpt = False,
    num_gpu_blocks: GpuBlocksOpt = None,
    block_size: BlockSizeOpt = None,
    tokenizer: TokenizerOpt = None,
    fmt: FormatOpt = OutputFormat.human,
    exit_zero: ExitZeroOpt = False,
) -> None:
    """Score every split of one GPU's memory between SGLang's KV cache (the radix cache), its embedding
    cache and its feature pool over the traffic, and recommend one.

    Each memory is replayed once per point by the code of 'mmpool cache' (the radix cache at each KV
    capacity, the embedding cache behind it) and 'mmpool simulate' (the pool at each budget), so each
    row is what those commands print at its settings. Prints the split to copy, what it buys over
    today's launch, and the Pareto front (no row better on every measure). With --engine vllm: vLLM's
    KV blocks (--num-gpu-blocks-override), encoder cache (--max-num-batched-tokens) and GPU decode pool
    (--mm-ipc-gpu-memory-gb), each row what 'mmpool cache --engine vllm' prints at its settings.
    """
    with reported():
        from mmpool_cli.cli import tune_vllm
        from mmpool_cli.engines import REGISTRY

        if engine_name not in REGISTRY:
            raise MmpoolError(f"--engine {engine_name}: choose one of {', '.join(sorted(REGISTRY))}")
        tune_vllm.refuse_other_engine(engine_name, told(ctx))
        if not 2 <= points <= MAX_POINTS:
            raise MmpoolError(f"--points {points}: from 2 to {MAX_POINTS}")
        if plot is not None:
            check_plot(plot)  # before any work
        kv_given = num_gpu_blocks if engine_name == "vllm" else max_total_tokens
        if budget is None and kv_given is None:  # said before the traffic is read
            _unknown_budget(engine_name)
    if engine_name == "vllm":
        with reported():
            report = tune_vllm.run(
                model,
                traffic or [],
                dataclasses.replace(vllm, gpu_name=gpu_name),
                assume_image=assume_image,
                window=window,
                prefix=(no_prefix_caching, num_gpu_blocks, block_size, tokenizer),
                budget=budget,
                objective=objective.value,
                points=points,
            )
            _plot(report, plot)
        _emit(report, fmt, exit_zero)
    with reported():
        query = tune_query(
            model,
            traffic or [],
            budget,
            objective.value,
            points,
            hidden_size,
            workers,
            tp,
            from_format,
            gpu_name,
            assume_image,
            assume_video,
            prefix_options(max_total_tokens, disable_radix_cache, page_size, tokenizer_path),
            trace=trace_file,
        )
        from mmpool_cli.usecases.tune import tune as run_tune

        report = run_tune(query)
        _plot(report, plot)
    _emit(report, fmt, exit_zero)


def _unknown_budget(engine_name: str) -> NoReturn:
    """No ``--budget`` and no KV size of today's launch: the engine's own refusal, before any traffic is read."""
    if engine_name == "vllm":
        from mmpool_cli.engines.vllm.tune import UNKNOWN_BUDGET
    else:
        from mmpool_cli.engines.sglang.tune import UNKNOWN_BUDGET
    raise MmpoolError(UNKNOWN_BUDGET)


def _plot(report: TuneReport, plot: str | None) -> None:
    """Draw the report into ``--plot FILE``, where given."""
    if plot is not None:
        from mmpool_cli.render.tune_plot import write_tune_plot

        write_tune_plot(report, plot)


def _emit(report: TuneReport, fmt: OutputFormat, exit_zero: bool) -> NoReturn:
    """Print the report; exit 0 where today's launch is as good as the recommendation (or --exit-zero), else 1."""
    from mmpool_cli.render.tune import to_json, tune_text

    emit(to_json(report) if fmt is OutputFormat.json else tune_text(report))
    raise typer.Exit(EXIT_OK if report.status == "ok" or exit_zero else EXIT_BELOW_TARGET)


def tune_query(
    model: str | None,
    traffic: list[str],
    budget: str | None,
    objective: str,
    points: int,
    hidden_size: int | None,
    workers: int,
    tp: int,
    from_format: LogFormat,
    gpu_name: str | None,
    assume_image: str | None,
    assume_video: str | None,
    prefix: PrefixOptions,
    trace: str | None = None,
) -> TuneQuery:
    """``mmpool tune``'s query from its flags (``check`` may build one alike): the traffic read once, as
    ``simulate --from`` reads it; the caches' query as ``cache`` makes it. Usage errors raise ``MmpoolError``."""
    import dataclasses

    from mmpool_cli.caches.report import DEFAULT_TARGET
    from mmpool_cli.cli.options import size_arg
    from mmpool_cli.cli.pool_options import PoolOptions
    from mmpool_cli.inputs.traffic.cache_request import items_of
    from mmpool_cli.usecases.cache import CacheQuery
    from mmpool_cli.usecases.trace import resolve_model
    from mmpool_cli.usecases.tune import TuneQuery
    from mmpool_cli.workload.hf import resolve
    from mmpool_cli.workload.kv import cell_bytes

    check_sglang_traffic_flags(traffic, trace, workers, tp, hidden_size)
    if trace is not None and os.path.isdir(trace):
        raise MmpoolError(
            f"--trace {trace}: a recording's directory; tune reads a trace file (mmpool trace --from {trace} -o FILE "
            "makes one)"
        )
    if trace is not None and (assume_image or assume_video or from_format is not LogFormat.auto):
        raise MmpoolError(
            "--assume-image, --assume-video and --from-format describe a log to read; a --trace carries its own sizes"
        )
    if not 2 <= points <= MAX_POINTS:
        raise MmpoolError(f"--points {points}: from 2 to {MAX_POINTS}")
    budget_bytes = None if budget is None else size_arg("--budget", budget)
    if budget_bytes is not None and budget_bytes <= 0:
        raise MmpoolError(f"--budget {budget}: a size above 0, e.g. 20GiB")
    family, settings = resolve_model(model, {}, {}, "sglang")
    resolved = resolve(model or "")
    cell = None if resolved.kv is None else cell_bytes(resolved.kv, tp, 2)[0]
    pools = PoolOptions(workers=workers, tp=tp).request(os.environ)
    if resolved.config_path is not None:
        prefix = dataclasses.replace(prefix, model_dir=os.path.dirname(resolved.config_path))
    events = None
    if trace is not None:  # its items as cache --trace reads them, its events as simulate --trace does
        from mmpool_cli.caches.from_trace import read_items
        from mmpool_cli.pools.trace_file import TraceFile
        from mmpool_cli.usecases.simulate import one_worker_refused

        items, prompts, leases, source = read_items(trace), {}, [], trace
        timeline = TraceFile(trace, workers, MAX_EVENTS, IDLE_TIMEOUT)
        events = timeline.read()
        if workers > 1 and events.worker and max(events.worker) == 0:
            one_worker_refused(timeline, workers)
        said = f"the pool: the times of {trace}, as 'mmpool simulate --trace' replays them"
    else:
        from mmpool_cli.core.collector import paused

        with paused(keep=True):  # the log's requests, kept until the command ends: no pass over them finds a cycle
            conversion = convert(
                model=model,
                source=SourceChoice(from_format.value),
                inputs=traffic,
                workers=workers,
                tp=tp,
                dp_encoder=False,
                recv_delay_ns=None,
                hold_ns=None,
                assume_image=assume_image,
                assume_video=assume_video,
                request_time="1",
            )
            items, prompts = items_of(conversion.leases, conversion.keys), conversion.prompts
        lifetimes = ", ".join(f"{n} {rule}" for rule, n in sorted(conversion.summary.lifetimes.items()))
        said = (
            f"the pool: arrivals as logged; leases {lifetimes}; receipt {DEFAULT_RECV_DELAY} s after arrival (as "
            "'mmpool simulate --from' reads the traffic)"
        )
        leases, source = conversion.leases, ", ".join(traffic)
    return TuneQuery(
        cache=CacheQuery(
            family=family,
            settings=settings,
            items=items,
            source=source,
            config_path=resolved.config_path,
            kv_cell_bytes=cell,
            hidden_size=hidden_size,
            environ=os.environ,
            preprocess_mb=None,
            workers=workers,
            gpu_name=gpu_name,
            target=DEFAULT_TARGET,
            prompts=prompts,
            prefix=prefix,
        ),
        pools=pools,
        leases=leases,
        budget_bytes=budget_bytes,
        budget_text=budget,
        objective=objective,
        points=points,
        assumptions=(said,),
        events=events,
    )
