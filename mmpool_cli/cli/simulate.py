"""``mmpool simulate``: replay a trace or a synthetic workload through SGLang's feature pools."""

from __future__ import annotations

import contextlib
import dataclasses
import os
from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Annotated, Any

import typer

from mmpool_cli.cli.app import app, emit, epilog, reported
from mmpool_cli.cli.options import (
    EngineChoice,
    FormatOpt,
    OutputFormat,
    SglangOnlyEngineOpt,
    check_plot,
    only_sglang,
    told,
    with_options,
)
from mmpool_cli.cli.pool_options import PoolOptions, with_pool_options
from mmpool_cli.cli.simulate_options import (
    DEFAULT_SEARCH_LIMIT,
    TRAFFIC_DECLARATIONS,
    BasisChoice,
    CurveCommand,
    CurveOpt,
    CurvePointsOpt,
    ExecutorChoice,
    RayAddressOpt,
    RunOptions,
    SearchChoice,
    TrafficOptions,
    curve_range,
    rate_arg,
    search_limit_arg,
)
from mmpool_cli.cli.traffic_options import (
    MAX_SECONDS,
    AssumeImageOpt,
    AssumeVideoOpt,
    DpEncoderOpt,
    RequestTimeOpt,
    SourceChoice,
)
from mmpool_cli.cli.workload_options import WorkloadOptions, with_workload_options
from mmpool_cli.engines.sglang import versions
from mmpool_cli.errors import EXIT_FINDINGS, EXIT_OK, MmpoolError
from mmpool_cli.render import render

if TYPE_CHECKING:
    from mmpool_cli.pools.report import SimulationReport
    from mmpool_cli.pools.trace_file import TraceFile
    from mmpool_cli.traces.events import Events


@app.command(
    cls=CurveCommand,
    short_help="Replay traffic through SGLang's cuda_ipc or cuda_vmm pools: fallback, the budget to set.",
    epilog=epilog(
        [
            "mmpool simulate --trace prod.jsonl --workers 2 --tp 2",
            "mmpool simulate --feature-size 48MiB --concurrency 32 --smallest-budget",
            "mmpool simulate --model qwen2.5-vl --image 1920x1080 --rate 4",
            "mmpool simulate --model qwen2.5-vl --from server.log --smallest-budget",
            "mmpool simulate --trace prod.jsonl --curve --model ./Qwen2.5-VL-7B",
        ],
        "0 the fallback meets the target (default 0); 1 it does not, or the budget has an error finding "
        "that plan reports (the report is still printed); 2 usage error or a bad trace line; 3 --executor ray: "
        "the Ray cluster cannot be reached or went away; 70 internal error.",
    ),
)
@with_pool_options
@with_workload_options
@with_options(TrafficOptions, TRAFFIC_DECLARATIONS, "traffic")
def simulate(
    ctx: typer.Context,
    pool: PoolOptions,
    workload: WorkloadOptions,
    traffic: TrafficOptions,
    trace: Annotated[
        str | None,
        typer.Option(
            "--trace",
            metavar="FILE",
            help="Trace to replay: JSON lines ('-' reads stdin) or a .parquet file; --model DIR gives it the KV "
            "tokens of --curve and --smallest-budget.",
        ),
    ] = None,
    traffic_from: Annotated[
        list[str] | None,
        typer.Option(
            "--from", metavar="FILE", help="Replay a server log or OpenAI body log (as 'mmpool trace'); repeat."
        ),
    ] = None,
    traffic_format: Annotated[
        SourceChoice, typer.Option("--from-format", help="The --from files' format; bench-serving reads ARGS.")
    ] = SourceChoice.auto,
    traffic_args: Annotated[
        list[str] | None,
        typer.Argument(metavar="[-- ARGS]", help="bench_serving's arguments (--from-format bench-serving)."),
    ] = None,
    dp_encoder: DpEncoderOpt = False,
    assume_image: AssumeImageOpt = None,
    assume_video: AssumeVideoOpt = None,
    request_time: RequestTimeOpt = "1",
    smallest_budget: Annotated[
        bool, typer.Option("--smallest-budget", help="Search for the smallest whole-MiB budget that meets the target.")
    ] = False,
    target_fallback: Annotated[
        str, typer.Option(metavar="RATE", help="Fallback rate to meet, e.g. 0.01 or 1/100.")
    ] = "0",
    target_basis: Annotated[BasisChoice, typer.Option(help="Count fallback by items or by bytes.")] = (
        BasisChoice.items
    ),
    search: Annotated[
        SearchChoice,
        typer.Option(
            help="safe: the smallest budget with every budget up to twice it meeting the target (exact); "
            "scan: the smallest that meets it at all (exact); bisect: an estimate of that."
        ),
    ] = SearchChoice.safe,
    search_limit: Annotated[
        str | None,
        typer.Option(
            metavar="EVENTS",
            help=f"Replay at most EVENTS events (500M, 2G) or N whole traces (200x) to prove the safe "
            f"(or scan) answer; past it the answer is labelled not proven. Default {DEFAULT_SEARCH_LIMIT}; "
            "for the mark of --curve alone, N = half the curve's points (at least 10M events).",
            show_default=False,
        ),
    ] = None,
    executor: Annotated[
        ExecutorChoice,
        typer.Option(
            help="Where the search's trials run and --from files are read: this machine, or a Ray cluster "
            "(mmpool[ray])."
        ),
    ] = ExecutorChoice.local,
    ray_address: RayAddressOpt = None,
    events: Annotated[bool, typer.Option("--events", help="JSON: the decision for every alloc, in order.")] = False,
    max_events: Annotated[int, typer.Option(metavar="N", help="Refuse traces with more events.")] = 10_000_000,
    idle_timeout: Annotated[float, typer.Option(metavar="SECONDS", help="Give up on a silent pipe.")] = 30.0,
    plot: Annotated[
        str | None,
        typer.Option(
            "--plot",
            metavar="FILE",
            help="Draw occupancy and fallback against the budget, or the --curve (.svg or .png; matplotlib).",
        ),
    ] = None,
    curve: CurveOpt = None,
    curve_points: CurvePointsOpt = None,
    output: FormatOpt = OutputFormat.human,
    engine: SglangOnlyEngineOpt = EngineChoice.sglang,
) -> None:
    """Simulate SGLang 0.5.23's feature pools under load: fallback, occupancy, the smallest safe budget.

    The features of one synthetic request are --feature-size bytes and the pooled tensors of
    --model with its --image, --video and --audio items; a --trace carries its own.
    """
    run_options = RunOptions(
        trace,
        smallest_budget,
        target_fallback,
        target_basis,
        search,
        events,
        max_events,
        idle_timeout,
        output,
        plot,
        search_limit,
        executor,
        ray_address,
        traffic_from=tuple(traffic_from or ()),
        traffic_format=traffic_format,
        traffic_args=tuple(traffic_args or ()),
        dp_encoder=dp_encoder,
        assume_image=assume_image,
        assume_video=assume_video,
        request_time=request_time,
        curve=curve,
        curve_points=curve_points,
    )
    with reported():
        only_sglang(engine, "simulate")
        report = _simulate(pool, workload, traffic, run_options, told(ctx))
        if plot is not None and report.curve is not None:
            from mmpool_cli.render.curve_plot import write_curve_plot

            write_curve_plot(report, plot)
        elif plot is not None:
            from mmpool_cli.render.plot import write_plot

            write_plot(report, plot)
    emit(render("simulate", output.value, report, events=events))
    raise typer.Exit(EXIT_OK if report.status == "ok" else EXIT_FINDINGS)


def _simulate(
    pool: PoolOptions, workload: WorkloadOptions, traffic: TrafficOptions, o: RunOptions, told: dict[str, str]
) -> SimulationReport:
    from mmpool_cli.usecases.simulate import SimulateRequest, TraceSource
    from mmpool_cli.usecases.simulate import simulate as run_simulate

    if o.events and o.output is not OutputFormat.json:
        raise MmpoolError("--events needs --format json")
    if o.plot is not None:
        check_plot(o.plot)
    target = rate_arg("--target-fallback", o.target_fallback)
    if not 0 < o.idle_timeout <= MAX_SECONDS:
        raise MmpoolError(f"--idle-timeout: expected seconds above 0 and up to {MAX_SECONDS}, not {o.idle_timeout}")
    if o.max_events < 1:
        raise MmpoolError(f"--max-events: must be at least 1, not {o.max_events}")
    search_limit = search_limit_arg(DEFAULT_SEARCH_LIMIT if o.search_limit is None else o.search_limit)
    curve = curve_range(o)
    if o.ray_address is not None and o.executor is not ExecutorChoice.ray:
        raise MmpoolError("--ray-address names the cluster of --executor ray; add --executor ray")
    from mmpool_cli.traces import recording

    environ: Mapping[str, str] = os.environ
    layout_said = ""
    if o.trace is not None:  # a recording (or a trace merged from one): its own layout, but for what the user set
        from mmpool_cli.cli.simulate_recording import own_layout

        merged = not recording.is_recording(o.trace)
        if (own := own_layout(pool, str(o.trace), told, environ, merged=merged)) is not None:
            pool, environ, layout_said = own
    request = pool.request(environ, told)
    from_traffic = bool(o.traffic_from) or o.traffic_format is SourceChoice.bench_serving
    needs = [(o.traffic_args, "ARGS"), (o.dp_encoder, "--mm-enable-dp-encoder"), (o.assume_image, "--assume-image")]
    needs += [(o.assume_video, "--assume-video"), (o.request_time != "1", "--request-time")]
    if not from_traffic and any(value for value, _ in needs):
        flag = next(name for value, name in needs if value)
        raise MmpoolError(f"{flag} describes traffic to read: use it with --from FILE or --from-format bench-serving")
    if from_traffic and o.trace is not None:
        raise MmpoolError("give one of --trace and --from")
    if from_traffic:  # --model sizes the items, and a model directory gives the KV tokens too
        load, kv = None, workload.kv_only(os.environ)
    elif o.trace is not None:
        given, items = traffic.given(), workload.item_flags()
        if given or pool.feature_size or items:
            flag = "--feature-size" if pool.feature_size else items[0] if items else sorted(given)[0]
            raise MmpoolError(f"{flag} describes a synthetic workload; a --trace carries its own events")
        load, kv = None, _trace_kv(workload, o, curve is not None)
    else:
        load, kv = workload.resolve(os.environ)
        _check_pooled(load)
    request = dataclasses.replace(request, workload=load, kv=kv)

    def read_traffic(workers: int, requests: bool) -> tuple[dict[str, Any], Events | TraceFile]:
        if from_traffic:
            from mmpool_cli.cli.simulate_traffic import from_traffic as converted
            from mmpool_cli.traces.events import as_events

            source, timeline = converted(request, workload, traffic, o)
            return source, as_events(timeline)
        from mmpool_cli.cli.simulate_traffic import assumptions, synthetic_events

        source, synthetic = synthetic_events(request, load, traffic)
        source["assumptions"] = assumptions(traffic)
        return source, synthetic

    return run_simulate(
        SimulateRequest(
            pools=request,
            environ=environ,
            traffic=read_traffic if o.trace is None else None,
            trace=None
            if o.trace is None
            else TraceSource(o.trace, o.max_events, o.idle_timeout, o.events, layout_said, request.vmm_granularity),
            target=target,
            basis=o.target_basis.value,
            method=o.search.value,
            smallest_budget=o.smallest_budget,
            record_events=o.events,
            search_limit=search_limit,
            # --curve alone marks a budget whose proof costs about what the curve does, never minutes more
            curve_proof=curve is not None and not o.smallest_budget and o.search_limit is None,
            executor=o.executor.value,
            ray_address=o.ray_address,
            keep_events=o.plot is not None and curve is None,  # a curve's picture is the curve
            model=None if load is None else load.model,
            progress=lambda what: _progress(o, what),
            curve=curve,
            kv_unknown="" if kv is not None else _kv_unknown(workload.model),
        )
    )


@contextlib.contextmanager
def _progress(o: RunOptions, what: str) -> Iterator[Callable[[int], None]]:
    """A progress line on stderr for a terminal and human output; nothing otherwise."""
    if o.output is not OutputFormat.human:
        yield lambda _done: None
        return
    from mmpool_cli.cli.progress import counting

    with counting("simulate", what) as update:
        yield update


def _trace_kv(workload: WorkloadOptions, o: RunOptions, curve: bool) -> Any:
    """A --trace's --model: the KV tokens of --curve and --smallest-budget, from a model directory's config."""
    kv = workload.kv_only(os.environ)
    if workload.model is None:
        return kv
    from mmpool_cli.core.excerpt import shorten

    if kv is None:
        raise MmpoolError(
            f"--model {shorten(workload.model)!r} gives no attention shape (a family name has none): with --trace, "
            "--model gives only the KV tokens, from a model directory whose config.json has num_hidden_layers"
        )
    if not (curve or o.smallest_budget):
        raise MmpoolError(
            "--model gives a --trace only the KV tokens that --curve and --smallest-budget report (a --trace "
            "carries its own events); add one of them, or leave --model out"
        )
    return kv


def _kv_unknown(model: str | None) -> str:
    """Why the KV tokens of a budget are unknown, and how to get them."""
    if model is None:
        return "give --model DIR (a model directory: its config.json gives the KV bytes per token)"
    from mmpool_cli.core.excerpt import shorten

    return (
        f"--model {shorten(model)!r} gives no attention shape (a family name has none); give a model directory "
        "whose config.json has it"
    )



def _check_pooled(load: Any) -> None:
    if load is not None and not load.pooled:
        raise MmpoolError(
            f"{load.model}: SGLang {versions.TEXTS_FROM} (mmpool's family table) does not pool this family's "
            "features, so the pool never fills (see 'mmpool plan --model'); nothing to simulate"
        )
