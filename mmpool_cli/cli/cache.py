"""``mmpool cache``: the engine's multimodal caches over real traffic, at the deployment's size and every size."""

from __future__ import annotations

import dataclasses
import os
from decimal import Decimal, InvalidOperation
from fractions import Fraction
from typing import TYPE_CHECKING, Annotated

import typer

from mmpool_cli.cli.app import app, emit, epilog, reported
from mmpool_cli.cli.cache_options import (
    SGLANG_ONLY,
    AssumeVideoOpt,
    ExitZeroOpt,
    FromFormatOpt,
    HiddenSizeOpt,
    LogFormat,
    PlotOpt,
    PreprocessMbOpt,
    TpOpt,
    WorkersOpt,
    check_sglang_traffic_flags,
)
from mmpool_cli.cli.cache_vllm import EncoderWindowOpt
from mmpool_cli.cli.options import FormatOpt, OutputFormat, PanelledCommand, check_plot, told
from mmpool_cli.cli.prefix_options import (
    VLLM_PREFIX,
    BlockSizeOpt,
    DisableRadixOpt,
    GpuBlocksOpt,
    MaxTotalTokensOpt,
    NoPrefixCachingOpt,
    PageSizeOpt,
    TokenizerOpt,
    TokenizerPathOpt,
    prefix_options,
    vllm_prefix_flags,
)
from mmpool_cli.cli.traffic_options import AssumeImageOpt, SourceChoice, convert
from mmpool_cli.cli.vllm_options import VllmOptions, with_vllm_options_sharing
from mmpool_cli.core.bounds import MAX_WORKERS
from mmpool_cli.core.collector import paused
from mmpool_cli.errors import EXIT_BELOW_TARGET, EXIT_OK, MmpoolError

if TYPE_CHECKING:
    from mmpool_cli.caches.report import CacheReport
    from mmpool_cli.inputs.traffic.cache_request import PrefixOptions

MAX_PREPROCESS_MB = 1 << 30  # 1 PiB of host RAM: beyond any machine


@app.command(
    cls=PanelledCommand,
    short_help="Hits of the engine's multimodal caches over real traffic, at every size, and the size to set.",
    epilog=epilog(
        [
            "mmpool cache --model /models/Qwen2.5-VL-7B-Instruct --from server.log",
            "mmpool cache --model qwen3-vl --hidden-size 4096 --gpu-name H100 --trace prod.jsonl --plot caches.svg",
            "mmpool cache --engine vllm --model qwen2.5-vl --from examples/traffic/vllm-chats.jsonl",
            "mmpool cache --engine vllm --model qwen2.5-vl --api-server-count 2 --trace prod.jsonl --format json",
        ],
        "0 every cache reaches its target at the deployment's size; 1 one does not (an off cache whose "
        "traffic would hit, or one too small; the report is printed, its JSON status 'fail'; --exit-zero "
        "makes it 0); 2 usage error, or input that cannot be sized (nothing on stdout); 70 internal error.",
    ),
)
@with_vllm_options_sharing("gpu_name")
def cache(
    ctx: typer.Context,
    vllm: VllmOptions,
    model: Annotated[
        str | None, typer.Option("--model", metavar="NAME|PATH", help="A model family or a model directory.")
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
            help="A trace of 'mmpool trace' (with its items' keys), or a recording's directory (mmpool record).",
        ),
    ] = None,
    engine_name: Annotated[
        str, typer.Option("--engine", metavar="NAME", help="The engine: sglang or vllm.")
    ] = "sglang",
    hidden_size: HiddenSizeOpt = None,
    preprocess_mb: PreprocessMbOpt = None,
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
    target: Annotated[
        str, typer.Option("--target-hits", metavar="PCT", help="Recommend the smallest size with PCT% of all hits.")
    ] = "99",
    assume_image: AssumeImageOpt = None,
    assume_video: AssumeVideoOpt = None,
    plot: PlotOpt = None,
    window: EncoderWindowOpt = 1,
    max_total_tokens: MaxTotalTokensOpt = None,
    disable_radix_cache: DisableRadixOpt = False,
    page_size: PageSizeOpt = 1,
    tokenizer_path: TokenizerPathOpt = None,
    no_prefix_caching: NoPrefixCachingOpt = False,
    num_gpu_blocks: GpuBlocksOpt = None,
    block_size: BlockSizeOpt = None,
    tokenizer: TokenizerOpt = None,
    fmt: FormatOpt = OutputFormat.human,
    exit_zero: ExitZeroOpt = False,
) -> None:
    """Replay each multimodal cache of the engine over the traffic, as the engine drives it.

    Items are keyed by their data (two requests with the same image bytes hit) and sized as the
    engine stores them; the curve comes from one pass where that is exact, else each point is replayed
    (docs/caches.md). Prints, per cache,
    the size the deployment sets (its environment and flags), its lookups, hits and the work they
    save, the whole curve, and the smallest size that reaches --target-hits of an unbounded cache's
    hits, with what it costs. With --engine vllm: vLLM's processor cache (host RAM) and encoder cache
    (tokens), the launch's flags read as 'plan --engine vllm' reads them.
    """
    with reported():
        recording = trace_file is not None and trace_file != "-" and os.path.isdir(trace_file)
        _refuse_other_engines(engine_name, told(ctx), recording)
        if recording:
            assert trace_file is not None
            report = _run_recorded(trace_file, engine_name, told(ctx), model, tp, target, plot, window)
    if recording:
        from mmpool_cli.render.caches import cache_text, meets, to_json

        with reported():
            if plot is not None:
                from mmpool_cli.render.cache_plot import write_cache_plot

                write_cache_plot(report, plot)
        emit(to_json(report) if fmt is OutputFormat.json else cache_text(report))
        _exit(all(meets(c) for c in report.caches), exit_zero)
    if engine_name == "vllm":
        _run_vllm(
            model,
            traffic or [],
            trace_file,
            dataclasses.replace(vllm, gpu_name=gpu_name),
            fmt,
            assume_image,
            window,
            target,
            exit_zero,
            (no_prefix_caching, num_gpu_blocks, block_size, tokenizer),
        )
        return
    with reported(), paused(keep=True):  # its prompts and prefix requests: millions of objects, no cycle
        report = _run(
            model,
            traffic or [],
            trace_file,
            engine_name,
            hidden_size,
            preprocess_mb,
            workers,
            tp,
            gpu_name,
            target,
            assume_image,
            assume_video,
            plot,
            from_format,
            prefix_options(max_total_tokens, disable_radix_cache, page_size, tokenizer_path),
        )
        from mmpool_cli.render.caches import cache_text, meets, to_json

        if plot is not None:
            from mmpool_cli.render.cache_plot import write_cache_plot

            write_cache_plot(report, plot)
    emit(to_json(report) if fmt is OutputFormat.json else cache_text(report))
    _exit(all(meets(c) for c in report.caches), exit_zero)


def _exit(met: bool, exit_zero: bool) -> None:
    """0 where every cache meets its target, else 1 (below target: the report was printed), unless --exit-zero."""
    raise typer.Exit(EXIT_OK if met or exit_zero else EXIT_BELOW_TARGET)


def _refuse_other_engines(engine_name: str, given: dict[str, str], recording: bool = False) -> None:
    """A usage error for a flag that means nothing for the engine chosen (or an unknown engine); with a
    recording, for a vLLM flag, which sizes a launch that the recording already holds."""
    from mmpool_cli.engines import REGISTRY

    if engine_name not in REGISTRY:
        raise MmpoolError(f"--engine {engine_name}: choose one of {', '.join(sorted(REGISTRY))}")
    vllm_only = {"window", *VLLM_PREFIX, *(f.name for f in dataclasses.fields(VllmOptions) if f.name != "gpu_name")}
    for name, flag in given.items():
        if recording and engine_name == "vllm" and (name in vllm_only - {"window"} or name == "model"):
            raise MmpoolError(
                f"{flag} describes a launch or its model; a recording of vLLM carries its caches' sizes and its "
                "entries' bytes"
            )
        if recording and name == "plot":
            continue  # a recording's report is drawn for either engine
        if engine_name == "vllm" and name in SGLANG_ONLY:
            raise MmpoolError(f"{flag} is for --engine sglang: {SGLANG_ONLY[name]}")
        if engine_name != "vllm" and name in VLLM_PREFIX:
            raise MmpoolError(f"{flag} is a vLLM flag ({VLLM_PREFIX[name]}): add --engine vllm")
        if engine_name != "vllm" and name in vllm_only:
            raise MmpoolError(f"{flag} is a vLLM flag: add --engine vllm")


def _run_vllm(
    model: str | None,
    traffic: list[str],
    trace_file: str | None,
    vllm: VllmOptions,
    fmt: OutputFormat,
    assume_image: str | None,
    window: int,
    target_text: str,
    exit_zero: bool,
    prefix: tuple[bool, int | None, int | None, str | None] = (False, None, None, None),
) -> None:
    from mmpool_cli.cli import cache_vllm

    with reported():
        flags = vllm_prefix_flags(*prefix, model)
        if bool(traffic) == (trace_file is not None):
            raise MmpoolError("give the traffic: --from FILE (a log; repeat) or --trace FILE, one of the two")
        if trace_file is not None and assume_image:
            raise MmpoolError("--assume-image sizes a log's URLs; a --trace carries its own sizes")
        target = _target(target_text)
        trace = None
        if trace_file is not None:
            from mmpool_cli.caches.from_trace import read_items

            trace = (trace_file, [(i.request, i.kind, i.key, i.nbytes) for i in read_items(trace_file)])
    met = cache_vllm.run(
        model, traffic, vllm, fmt, assume_image=assume_image, window=window, target=target, trace=trace, flags=flags
    )
    _exit(met, exit_zero)


def _run_recorded(
    directory: str,
    engine_name: str,
    given: dict[str, str],
    model: str | None,
    tp: int,
    target: str,
    plot: str | None,
    window: int,
) -> CacheReport:
    """``--trace REC_DIR``: the caches the recording holds, at their recorded size and others."""
    from mmpool_cli.usecases.cache import recorded

    for name in (
        "traffic",
        "hidden_size",
        "preprocess_mb",
        "workers",
        "gpu_name",
        "assume_image",
        "assume_video",
        "max_total_tokens",
        "disable_radix_cache",
        "page_size",
        "tokenizer_path",
    ):
        if name in given:
            raise MmpoolError(
                f"{given[name]} describes traffic or a deployment to size; a recording (--trace {directory}) carries "
                "its own lookups, entries' bytes and cache size"
            )
    if not 1 <= tp <= MAX_WORKERS:
        raise MmpoolError(f"--tp {tp}: from 1 to {MAX_WORKERS}")
    if plot is not None:
        check_plot(plot)
    cell = None
    if model is not None:  # the KV tokens the recommended size costs, from a model directory
        from mmpool_cli.workload.hf import resolve
        from mmpool_cli.workload.kv import cell_bytes

        resolved = resolve(model)
        cell = None if resolved.kv is None else cell_bytes(resolved.kv, tp, 2)[0]
    if engine_name == "vllm":
        from mmpool_cli.usecases.cache_vllm import check_window

        check_window(window)
    return recorded(directory, _target(target), cell, engine_name, window)


def _target(text: str) -> Fraction:
    try:
        value = Fraction(Decimal(text.strip()))
    except (InvalidOperation, ValueError):
        raise MmpoolError(f"--target-hits {text}: a percentage from 0 to 100, e.g. 99 or 99.5") from None
    if not 0 <= value <= 100:
        raise MmpoolError(f"--target-hits {text}: a percentage from 0 to 100, e.g. 99 or 99.5")
    return value


def _run(
    model: str | None,
    traffic: list[str],
    trace_file: str | None,
    engine_name: str,
    hidden_size: int | None,
    preprocess_mb: int | None,
    workers: int,
    tp: int,
    gpu_name: str | None,
    target_text: str,
    assume_image: str | None,
    assume_video: str | None,
    plot: str | None,
    from_format: LogFormat = LogFormat.auto,
    prefix: PrefixOptions | None = None,
) -> CacheReport:
    from mmpool_cli.usecases.cache import CacheQuery, cache
    from mmpool_cli.usecases.trace import resolve_model

    check_sglang_traffic_flags(traffic, trace_file, workers, tp, hidden_size)
    if preprocess_mb is not None and not 0 <= preprocess_mb <= MAX_PREPROCESS_MB:
        raise MmpoolError(
            f"--mm-preprocess-cache-size-mb {preprocess_mb}: SGLang refuses a negative size "
            f"(mm_preprocess_cache_size_mb must be non-negative); give 0 to {MAX_PREPROCESS_MB}"
        )
    target = _target(target_text)
    if plot is not None:
        check_plot(plot)
    if trace_file is not None and (assume_image or assume_video):
        raise MmpoolError("--assume-image and --assume-video size a log's URLs; a --trace carries its own sizes")
    family, settings = resolve_model(model, {}, {}, engine_name)
    from mmpool_cli.workload.hf import resolve
    from mmpool_cli.workload.kv import cell_bytes

    resolved = resolve(model or "")
    cell = None if resolved.kv is None else cell_bytes(resolved.kv, tp, 2)[0]
    if trace_file is not None:
        from mmpool_cli.caches.from_trace import read_items

        items, source = read_items(trace_file), trace_file
        prompts = {}
    else:
        from mmpool_cli.inputs.traffic.cache_request import items_of

        conversion = convert(
            model=model,
            source=SourceChoice(from_format.value),
            inputs=traffic,
            workers=workers,
            tp=tp,
            dp_encoder=False,
            recv_delay_ns=None,
            hold_ns=10**9,
            assume_image=assume_image,
            assume_video=assume_video,
            request_time="1",
        )
        items, source = items_of(conversion.leases, conversion.keys), ", ".join(traffic)
        prompts = conversion.prompts
    if prefix is None:
        from mmpool_cli.inputs.traffic.cache_request import PrefixOptions

        prefix = PrefixOptions()
    if resolved.config_path is not None:
        prefix = dataclasses.replace(prefix, model_dir=os.path.dirname(resolved.config_path))
    return cache(
        CacheQuery(
            family=family,
            settings=settings,
            items=items,
            source=source,
            config_path=resolved.config_path,
            kv_cell_bytes=cell,
            hidden_size=hidden_size,
            environ=os.environ,
            preprocess_mb=preprocess_mb,
            workers=workers,
            gpu_name=gpu_name,
            target=target,
            prompts=prompts,
            prefix=prefix,
        ),
        engine_name,
    )
