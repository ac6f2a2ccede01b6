"""``mmpool simulate``: replay a trace or a synthetic workload through SGLang's cuda_ipc pools."""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from enum import StrEnum
from fractions import Fraction
from typing import TYPE_CHECKING, Annotated, Any

import typer

if TYPE_CHECKING:
    from mmpool_cli.simulate.replay import Event
    from mmpool_cli.simulate.sim_report import SimulationReport

from mmpool_cli.cli.app import app, emit, epilog, reported
from mmpool_cli.cli.options import (
    EngineChoice,
    EngineOpt,
    FormatOpt,
    OutputFormat,
    PoolOptions,
    TransportChoice,
    only_sglang,
    with_options,
    with_pool_options,
)
from mmpool_cli.cli.workload_options import KvDtypeChoice, WorkloadOptions, with_workload_options
from mmpool_cli.engines import engine
from mmpool_cli.engines.sglang import versions
from mmpool_cli.engines.sglang.models import PlanRequest
from mmpool_cli.errors import EXIT_FINDINGS, EXIT_OK, MmpoolError
from mmpool_cli.render import render


class ModeChoice(StrEnum):
    eager = "eager"
    deferred = "deferred"


class ResidencyChoice(StrEnum):
    fixed = "fixed"
    exponential = "exponential"


class SearchChoice(StrEnum):
    bisect = "bisect"
    scan = "scan"


class BasisChoice(StrEnum):
    items = "items"
    bytes = "bytes"


MAX_SECONDS = 10**6


def seconds_arg(flag: str, text: str) -> int:
    """A non-negative number of seconds as whole nanoseconds; anything finer or odd is a usage error."""
    try:
        value = Decimal(text.strip())
        ns = value.scaleb(9) if value.is_finite() and 0 <= value <= MAX_SECONDS else None
    except InvalidOperation:
        ns = None
    if ns is None:
        raise MmpoolError(f"{flag}: expected seconds from 0 to {MAX_SECONDS}, e.g. 0.05, not {text!r}")
    if ns != ns.to_integral_value():
        raise MmpoolError(f"{flag}: {text} is finer than a nanosecond")
    return int(ns)


def rate_arg(flag: str, text: str) -> Fraction:
    """A fallback rate from 0 to 1, exactly as written (``0.01`` or ``1/100``)."""
    try:
        rate = Fraction(text.strip())
    except (ValueError, ZeroDivisionError):
        rate = None
    if rate is None or not 0 <= rate <= 1:
        raise MmpoolError(f"{flag}: expected a fraction from 0 to 1, e.g. 0.01, not {text!r}")
    return rate


@dataclass(frozen=True)
class TrafficOptions:
    """The flags of a synthetic workload, as given; the field defaults are the flags' defaults."""

    rate: float | None = None
    concurrency: int | None = None
    requests: int = 1000
    duration: str = "1"
    residency: ResidencyChoice = ResidencyChoice.fixed
    mode: ModeChoice = ModeChoice.eager
    ack_delay: str = "0"
    hold: str | None = None
    seed: int = 0

    def given(self) -> list[str]:
        """The flags set to something other than their default, as ``--flag-name``."""
        return ["--" + f.name.replace("_", "-") for f in dataclasses.fields(self) if getattr(self, f.name) != f.default]


_TRAFFIC_DECLARATIONS = {
    "rate": Annotated[float | None, typer.Option(metavar="R", help="Synthetic: requests per second (Poisson).")],
    "concurrency": Annotated[
        int | None, typer.Option(metavar="N", help="Synthetic: clients, each waiting for its request.")
    ],
    "requests": Annotated[int, typer.Option(metavar="N", help="Synthetic: requests in all.")],
    "duration": Annotated[str, typer.Option(metavar="SECONDS", help="Synthetic: mean request time.")],
    "residency": Annotated[ResidencyChoice, typer.Option(help="Synthetic: request times fixed or exponential.")],
    "mode": Annotated[
        ModeChoice, typer.Option(help="Synthetic: ack on receipt (eager) or at prefill/request end (deferred).")
    ],
    "ack_delay": Annotated[str, typer.Option(metavar="SECONDS", help="Eager: arrival to acknowledgement.")],
    "hold": Annotated[
        str | None, typer.Option(metavar="SECONDS", help="Deferred: arrival to acknowledgement (default: the end).")
    ],
    "seed": Annotated[int, typer.Option(metavar="N", help="Synthetic: random seed.")],
}


@dataclass(frozen=True)
class RunOptions:
    """What to replay and what to report, beyond the pool, the workload and the traffic."""

    trace: str | None
    smallest_budget: bool
    target_fallback: str
    target_basis: BasisChoice
    search: SearchChoice
    events: bool
    max_events: int
    idle_timeout: float
    output: OutputFormat


@app.command(
    short_help="Replay traffic through SGLang's cuda_ipc pools: fallback, the smallest budget.",
    epilog=epilog(
        [
            "mmpool simulate --trace prod.jsonl --workers 2 --tp 2",
            "mmpool simulate --feature-size 48MiB --concurrency 32 --smallest-budget",
            "mmpool simulate --model qwen2.5-vl --image 1920x1080 --rate 4",
        ],
        "0 the fallback meets the target (default 0); 1 it does not, or SGLang refuses the budget "
        "(the report is still printed); 2 usage error or a bad trace line; 70 internal error.",
    ),
)
@with_pool_options
@with_workload_options
@with_options(TrafficOptions, _TRAFFIC_DECLARATIONS, "traffic")
def simulate(
    pool: PoolOptions,
    workload: WorkloadOptions,
    traffic: TrafficOptions,
    trace: Annotated[
        str | None, typer.Option("--trace", metavar="FILE", help="JSON-lines trace to replay; '-' reads stdin.")
    ] = None,
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
        SearchChoice, typer.Option(help="bisect (checks one MiB below) or scan (every budget below: exact).")
    ] = SearchChoice.bisect,
    events: Annotated[bool, typer.Option("--events", help="JSON: the decision for every alloc, in order.")] = False,
    max_events: Annotated[int, typer.Option(metavar="N", help="Refuse traces with more events.")] = 10_000_000,
    idle_timeout: Annotated[float, typer.Option(metavar="SECONDS", help="Give up on a silent pipe.")] = 30.0,
    output: FormatOpt = OutputFormat.human,
    engine: EngineOpt = EngineChoice.sglang,
) -> None:
    """Simulate SGLang 0.5.23's cuda_ipc pools under load: fallback, occupancy, the smallest budget.

    The features of one synthetic request are --feature-size bytes and the pooled tensors of
    --model with its --image, --video and --audio items; a --trace carries its own.
    """
    run_options = RunOptions(
        trace, smallest_budget, target_fallback, target_basis, search, events, max_events, idle_timeout, output
    )
    with reported():
        only_sglang(engine, "simulate")
        report = _simulate(pool, workload, traffic, run_options)
    emit(render("simulate", output.value, report, events=events))
    raise typer.Exit(EXIT_OK if report.meets_target else EXIT_FINDINGS)


def _simulate(
    pool: PoolOptions, workload: WorkloadOptions, traffic: TrafficOptions, o: RunOptions
) -> SimulationReport:
    from mmpool_cli.usecases.simulate import SimulateRequest
    from mmpool_cli.usecases.simulate import simulate as run_simulate

    eng = engine()
    if pool.transport is TransportChoice.cuda_vmm:
        raise MmpoolError(eng.simulation_refusal(eng.releases()[-1], pool.transport.value) or "")
    ignored = {"--vmm-granularity", "--context-size"} & set(pool.given())
    if ignored:
        raise MmpoolError(f"{sorted(ignored)[0]} does not change the simulation; drop it")
    if o.events and o.output is not OutputFormat.json:
        raise MmpoolError("--events needs --format json")
    target = rate_arg("--target-fallback", o.target_fallback)
    if not 0 < o.idle_timeout <= MAX_SECONDS:
        raise MmpoolError(f"--idle-timeout: expected seconds above 0 and up to {MAX_SECONDS}, not {o.idle_timeout}")
    if o.max_events < 1:
        raise MmpoolError(f"--max-events: must be at least 1, not {o.max_events}")
    request = pool.request(os.environ)

    def read_traffic(workers: int) -> tuple[dict[str, Any], list[Event]]:
        if workload.kv_cache_dtype is not KvDtypeChoice.auto or workload.page_size != 1:
            raise MmpoolError("--kv-cache-dtype and --page-size do not change the simulation; use them with plan")
        if o.trace is None:
            return _synthetic(request, _model_items(workload), traffic)
        given = traffic.given()
        if given or pool.feature_size or workload.model is not None:
            flag = "--feature-size" if pool.feature_size else "--model" if workload.model else sorted(given)[0]
            raise MmpoolError(f"{flag} describes a synthetic workload; a --trace carries its own events")
        from mmpool_cli.simulate.trace import read_trace

        return {"trace": o.trace}, read_trace(o.trace, workers, max_events=o.max_events, idle_timeout=o.idle_timeout)

    return run_simulate(
        SimulateRequest(
            pools=request,
            environ=os.environ,
            traffic=read_traffic,
            target=target,
            basis=o.target_basis.value,
            method=o.search.value,
            smallest_budget=o.smallest_budget,
            record_events=o.events,
        )
    )


def _model_items(workload: WorkloadOptions) -> tuple[int, ...]:
    """The bytes of each tensor that --model's items of one request put in the pool."""
    load, _ = workload.resolve(os.environ)
    if load is None:
        return ()
    if not load.pooled:
        raise MmpoolError(
            f"{load.model}: SGLang {versions.TEXTS_FROM} (mmpool's family table) does not pool this family's features, "
            "so the pool never fills (see 'mmpool plan --model'); nothing to simulate"
        )
    if not load.tensors:
        raise MmpoolError("--model needs the items of one request: --image, --video or --audio")
    return tuple(t.bytes for t in load.tensors)


def _synthetic(
    request: PlanRequest, model_items: tuple[int, ...], t: TrafficOptions
) -> tuple[dict[str, Any], list[Event]]:
    from mmpool_cli.simulate.synthetic import SyntheticWorkload, synthesize

    workload = SyntheticWorkload(
        items=request.feature_sizes + model_items,
        requests=t.requests,
        rate=t.rate,
        concurrency=t.concurrency,
        duration_ns=seconds_arg("--duration", t.duration),
        residency=t.residency.value,
        mode=t.mode.value,
        ack_delay_ns=seconds_arg("--ack-delay", t.ack_delay),
        hold_ns=None if t.hold is None else seconds_arg("--hold", t.hold),
        seed=t.seed,
    )
    timeline = synthesize(workload, request.workers)
    return {"synthetic": dataclasses.asdict(workload) | {"items": list(workload.items)}}, timeline
