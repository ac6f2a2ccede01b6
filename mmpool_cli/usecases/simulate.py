"""``mmpool simulate``: replay traffic through the engine's pools, and search for the smallest safe budget.

The engine turns the request into pools (``Engine.simulation_setup``: the layouts of every budget,
the findings of its plan, the budgets it accepts); the neutral simulator (``mmpool_cli.simulate``)
replays the traffic through them. No typer, rich or torch.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from mmpool_cli.engines import DEFAULT, engine
from mmpool_cli.errors import EXIT_FINDINGS, MmpoolError
from mmpool_cli.pools.budget_search import Basis, Method, Progress, smallest_budget
from mmpool_cli.pools.curve import PoolCurve
from mmpool_cli.pools.curve_range import CurveRange
from mmpool_cli.pools.replay import simulate as replay
from mmpool_cli.pools.report import PoolSetup, SimulationReport
from mmpool_cli.pools.trace_file import TraceFile
from mmpool_cli.traces.events import Event, Events, as_events
from mmpool_cli.traces.recorded_layout import DEFAULT_GRANULARITY


@dataclass(frozen=True)
class TraceSource:
    """``--trace``: a file of events, or a recording's directory (merged, then compared with the replay)."""

    path: str
    max_events: int
    idle_timeout: float
    keep_ids: bool
    assumptions: str = ""  # how a recording's layout was chosen, said in the report
    granularity: int = DEFAULT_GRANULARITY  # cuda_vmm's, for the whole-MiB budget record-not-compared advises


# (workers, whether to group requests) -> (the source as the report names it, its events or a trace file)
Traffic = Callable[[int, bool], tuple[dict[str, Any], "list[Event] | Events | TraceFile"]]
# (what, total or None) -> a context giving a callable that reports how much is done
ProgressFor = Callable[[str], Any]


@dataclass(frozen=True)
class SimulateRequest:
    """One simulation: the engine's plan request for the pools, the traffic, and what to report."""

    pools: Any  # the engine's plan request
    environ: Mapping[str, str]
    traffic: Traffic | None = None  # synthetic or converted traffic; None with ``trace``
    trace: TraceSource | None = None
    target: Fraction = Fraction(0)
    basis: Basis = "items"
    method: Method = "safe"
    smallest_budget: bool = False
    record_events: bool = False
    engine_name: str = DEFAULT
    search_limit: tuple[int, str] | None = None  # (count, "events" or "replays" of the trace)
    executor: str = "local"  # where the search's trials run: "local" or "ray"
    ray_address: str | None = None
    keep_events: bool = False  # for a picture
    model: str | None = None
    progress: ProgressFor | None = None
    curve: CurveRange | None = None  # the pool's curve over these budgets, the search's answer marked
    curve_proof: bool = False  # the mark of --curve alone: its proof bounded at about the curve's own cost
    kv_unknown: str = ""  # where the KV tokens are unknown: why, and how to get them


# the least the proof of --curve's mark may replay (events): about a second of the compiled replay, so
# that a small trace's mark is proven whatever its curve's points cost
CURVE_PROOF_EVENTS = 10_000_000


class NoBudgetError(MmpoolError):
    """The plan accepts no budget for the layout a search was asked for: an error finding, one line."""

    exit_code = EXIT_FINDINGS


def simulate(request: SimulateRequest) -> SimulationReport:
    """Replay the traffic through the pools the request makes; usage errors raise ``MmpoolError``."""
    from contextlib import nullcontext

    eng = engine(request.engine_name)
    refused_release = eng.simulation_refusal(request.pools.sglang_version, request.pools.transport)
    if refused_release is not None:
        raise MmpoolError(refused_release)
    pools = eng.simulation_setup(request.pools, request.environ)
    if request.smallest_budget and pools.highest_mb < pools.lowest_mb:  # before any traffic is made or read
        raise NoBudgetError(
            f"--smallest-budget: the plan refuses every budget for this layout; at the smallest, "
            f"{pools.lowest_mb} MiB: {pools.refused_every}"
        )
    recorded: Any = None
    if request.trace is not None:
        source, timeline, recorded = _read_trace(request.trace, pools.workers, pools.rules.allocator == "cuda_vmm")
    elif request.traffic is not None:
        source, timeline = request.traffic(pools.workers, pools.rules.allocator == "cuda_vmm")
    else:
        raise ValueError("a simulation needs traffic or a trace")

    def progress(what: str) -> Any:
        return nullcontext(lambda _done: None) if request.progress is None else request.progress(what)

    result = None
    events: Events | None = None
    many = request.smallest_budget or request.curve is not None  # replays of the events read whole
    record = request.record_events or request.keep_events or recorded is not None  # a recording: decision by decision
    one_replay = not (many or record)
    if not (isinstance(timeline, TraceFile) and one_replay and pools.per_worker_bytes is not None):
        events = as_events(timeline.read() if isinstance(timeline, TraceFile) else timeline)
        if isinstance(timeline, TraceFile) and pools.workers > 1 and events.worker and max(events.worker) == 0:
            one_worker_refused(timeline, pools.workers)
    if pools.per_worker_bytes is not None:
        layout = pools.layouts(pools.budget_mb)
        with progress("simulating") as tick:
            if events is not None:
                result = replay(events, layout, record=record)
            elif isinstance(timeline, TraceFile):  # one replay of a file: as it is read, where it can be
                result = timeline.replay(layout)
                if result.workers[0].items and not any(w.items for w in result.workers[1:]):
                    one_worker_refused(timeline, pools.workers)
            tick(1)
    report = SimulationReport(
        source=source,
        budget_bytes=pools.budget_bytes,
        sglang_mm_feature_cache_mb=pools.budget_mb,
        tp_size=pools.tp_size,
        consumers=pools.consumers,
        recycle_source=pools.recycle_source,
        result=result,
        refused=pools.refused,
        target=request.target,
        basis=request.basis,
        transport=pools.rules.allocator,
        sglang_version=pools.version,
        sglang_version_chosen=pools.chosen,
        findings=pools.findings,
        model=request.model,
    )
    planned = None
    if request.curve is not None:  # its range checked before any replay
        from mmpool_cli.pools.curve_range import plan_curve

        assert events is not None
        planned = plan_curve(request.curve, events, pools)
        # the curve first: its whole replays are the search's first trials, so the mark costs only its proof
        report.curve = _curve(request, eng, pools, events, progress, planned)
    if request.smallest_budget or planned is not None:  # a curve marks the budget the search recommends
        assert events is not None  # a search replays the events many times: they were read whole
        from mmpool_cli.pools.executors import executor_for

        run_on = executor_for(request.executor, address=request.ray_address)
        searched: Progress
        with progress("searching budgets") as searched:
            found = smallest_budget(
                events,
                layouts=pools.layouts,
                lowest=pools.lowest_mb,
                highest=pools.highest_mb,
                target=request.target,
                basis=request.basis,
                method=request.method,
                executor=run_on,
                progress=searched,
                max_events=_limit_events(request, len(events)),
                known=[] if report.curve is None else report.curve.trials,
            )
        report.search = found
        if found.smallest_mb is not None:
            chosen = eng.plan_for_budget(request.pools, found.smallest_mb)
            report.settings = chosen.settings
            report.kv_cost = getattr(chosen, "kv_cost", None)
    if request.keep_events:
        report.events_data = events
    if recorded is not None:
        from mmpool_cli.pools.recorded import compare, damage_findings

        assert request.trace is not None
        report.findings.extend(damage_findings(recorded))
        report.findings.extend(
            compare(recorded, report.result, request.trace.granularity, header_for=pools.header_for)
        )
    return report


def _read_trace(trace: TraceSource, workers: int, requests: bool) -> tuple[dict[str, Any], Any, Any]:
    """The source, the events (or the file, replayed as read) and the recording, if ``trace`` is one."""
    from mmpool_cli.traces import recording

    if recording.is_recording(trace.path):  # a directory of mmpool record: its pools merged, compared after
        events, rec = recording.read_recording(
            trace.path, workers, max_events=trace.max_events, idle_timeout=trace.idle_timeout, keep_ids=trace.keep_ids
        )
        return {"trace": trace.path, **rec.source(), "assumptions": trace.assumptions}, events, rec
    timeline = TraceFile(
        trace.path, workers, trace.max_events, trace.idle_timeout, keep_ids=trace.keep_ids, requests=requests
    )
    said = {"assumptions": trace.assumptions} if trace.assumptions else {}  # a trace merged from a recording
    return {"trace": trace.path, **said}, timeline, None


def _limit_events(request: SimulateRequest, trace_events: int) -> int | None:
    """The search limit in replayed events: as given, or so many whole replays of the trace; for the mark of
    ``--curve`` alone (``curve_proof``), the larger of ``CURVE_PROOF_EVENTS`` and half the curve's replays
    (with the bisection's, the mark then costs about what the curve does)."""
    if request.curve_proof and request.curve is not None:
        return max(CURVE_PROOF_EVENTS, request.curve.points * trace_events // 2)
    if request.search_limit is None:
        return None
    count, unit = request.search_limit
    return count * trace_events if unit == "replays" else count


def one_worker_refused(trace: TraceFile, workers: int) -> None:
    """Refuse a trace whose every alloc names worker 0, replayed over more workers than one.

    Such a trace was made for one worker (``mmpool trace``'s default): its traffic would all go to
    worker 0 while the others idle, a budget several times too large. SGLang itself deals no request:
    each tokenizer worker is an HTTP server process, and the kernel gives each one connections, so
    the dealing is chosen when the trace is made (``trace --workers N``: round-robin), never guessed here.
    """
    if workers > 1:
        raise MmpoolError(
            f"--workers {workers}: every alloc of --trace {trace.path} is on worker 0, so the other {workers - 1} "
            f"would idle (a trace made for one worker); make it for {workers}: mmpool trace --workers {workers} "
            f"(or simulate --from LOG --workers {workers}); for one worker taking all the traffic, simulate "
            "--workers 1 with its share as --size"
        )


def _curve(
    request: SimulateRequest,
    eng: Any,
    pools: PoolSetup,
    events: Events,
    progress: ProgressFor,
    planned: PoolCurve,
) -> PoolCurve:
    """The pool's curve, each point's KV tokens as the engine's plan counts them at that budget."""
    from mmpool_cli.pools.curve_range import fill_curve
    from mmpool_cli.pools.executors import executor_for

    def kv_tokens(mb: int) -> int | None:
        cost = getattr(eng.plan_for_budget(request.pools, mb), "kv_cost", None)
        return None if cost is None else int(cost.tokens_max)

    with progress("replaying the curve's budgets") as tick:
        made = fill_curve(
            planned,
            events,
            pools,
            executor=executor_for(request.executor, address=request.ray_address),
            kv_tokens=kv_tokens if getattr(request.pools, "kv", None) is not None else None,
            progress=tick,
        )
    return dataclasses.replace(made, kv_unknown=request.kv_unknown)
