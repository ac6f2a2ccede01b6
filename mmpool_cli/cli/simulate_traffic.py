"""``simulate``'s traffic: ``--from`` logs converted as ``mmpool trace`` converts them, and a synthetic
workload's events and one-line assumptions."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import typer

from mmpool_cli.cli.fleet import file_reader
from mmpool_cli.cli.options import OutputFormat
from mmpool_cli.cli.traffic_options import DEFAULT_RECV_DELAY, SourceChoice, convert, seconds
from mmpool_cli.cli.workload_options import WorkloadOptions
from mmpool_cli.core.words import count
from mmpool_cli.engines.sglang.models import PlanRequest
from mmpool_cli.errors import MmpoolError

if TYPE_CHECKING:
    from mmpool_cli.cli.simulate_options import RunOptions, TrafficOptions
    from mmpool_cli.pools.replay import Event
    from mmpool_cli.traces.events import Events


def assumptions(t: TrafficOptions) -> str:
    """The synthetic workload's assumptions, in one line."""
    if t.rate is not None:
        arrivals = f"Poisson arrivals at {t.rate:g}/s"
    elif t.burst:
        arrivals = f"{count(t.concurrency or 0, 'client')}, every first request at t = 0 (--burst)"
    else:
        arrivals = f"{count(t.concurrency or 0, 'client')}, first requests spread over one request time"
    residency = f"{t.residency.value} request times of {t.duration} s" + (
        " on average" if t.residency.value == "exponential" else ""
    )
    if t.mode.value == "eager":
        lifetime = f"eager: acknowledged {t.ack_delay} s after arrival (the scheduler's receipt)"
    else:
        lifetime = "deferred: held " + (f"{t.hold} s" if t.hold is not None else "until the request ends")
    return f"{arrivals}; {residency}; {lifetime}"


def from_traffic(
    request: PlanRequest, workload: WorkloadOptions, traffic: TrafficOptions, o: RunOptions
) -> tuple[dict[str, Any], list[Event]]:
    """Convert --from traffic into events, as 'mmpool trace' does, and say what was assumed."""
    from mmpool_cli.inputs.traffic import writer

    allowed = {"--ack-delay", "--hold"}
    given = [f for f in traffic.given() if f not in allowed]
    if given or request.feature_sizes or workload.image or workload.video or workload.audio:
        flag = sorted(given)[0] if given else "--feature-size" if request.feature_sizes else "--image/--video/--audio"
        raise MmpoolError(f"{flag} describes a synthetic workload; --from traffic carries its own requests")
    overrides = {
        "min_pixels": workload.min_pixels,
        "max_pixels": workload.max_pixels,
        "patch_size": workload.patch_size,
        "max_frames": workload.max_frames,
        "pan_and_scan": True if workload.pan_and_scan else None,
    }
    flags = {
        "min_pixels": "--min-pixels",
        "max_pixels": "--max-pixels",
        "patch_size": "--patch-size",
        "max_frames": "--max-frames",
        "pan_and_scan": "--pan-and-scan",
    }
    inputs = list(o.traffic_args if o.traffic_format is SourceChoice.bench_serving else o.traffic_from)
    if o.traffic_format is SourceChoice.bench_serving and o.traffic_from:
        raise MmpoolError("--from-format bench-serving reads bench_serving's arguments after --, not --from files")
    files = o.traffic_format is not SourceChoice.bench_serving
    shown = len(inputs) if files and o.output is OutputFormat.human and len(inputs) > 1 else 0
    with file_reader(
        o.executor, o.ray_address, shown, command="simulate", job="reading --from", unfinished="no answer was reached"
    ) as map_files:
        conversion = convert(
            model=workload.model,
            source=o.traffic_format,
            inputs=inputs,
            workers=request.workers,
            tp=request.tp_size,
            dp_encoder=o.dp_encoder,
            # the flag's default is the engine's stated step: let the engine say so in the summary
            recv_delay_ns=None
            if traffic.ack_delay == DEFAULT_RECV_DELAY
            else seconds("--recv-delay", traffic.ack_delay),
            hold_ns=None if traffic.hold is None else seconds("--hold", traffic.hold),
            assume_image=o.assume_image,
            assume_video=o.assume_video,
            request_time=o.request_time,
            overrides=overrides,
            override_flags=flags,
            map_files=map_files,
        )
    summary = conversion.summary
    if o.output is OutputFormat.human:
        typer.echo(summary.text(), err=True)
    name = ", ".join(summary.files)
    arrivals = "arrivals as bench_serving sends them" if summary.source == "bench-serving" else "arrivals as logged"
    lifetimes = ", ".join(f"{n} {rule}" for rule, n in sorted(summary.lifetimes.items()))
    source = {
        "trace": f"from {name}",
        "traffic": summary.to_data(),
        "assumptions": f"{arrivals}; leases {lifetimes}; receipt {traffic.ack_delay} s after arrival",
    }
    return source, writer.events(conversion.leases)


def synthetic_events(request: PlanRequest, load: Any, t: TrafficOptions) -> tuple[dict[str, Any], Events]:
    """The events of the synthetic workload the flags describe, and the source as the report names it."""
    import dataclasses

    from mmpool_cli.cli.traffic_options import seconds as seconds_arg
    from mmpool_cli.traces.synthetic import SyntheticWorkload, synthesize

    if load is not None and not load.tensors:
        raise MmpoolError("--model needs the items of one request: --image, --video or --audio")
    tensors = () if load is None else tuple(load.tensors)
    workload = SyntheticWorkload(
        items=request.feature_sizes + tuple(x.bytes for x in tensors),
        packable=(True,) * len(request.feature_sizes) + tuple(_visual(x) for x in tensors),
        element_sizes=(1,) * len(request.feature_sizes) + tuple(_element_size(x) for x in tensors),
        requests=t.requests,
        rate=t.rate,
        concurrency=t.concurrency,
        duration_ns=seconds_arg("--duration", t.duration),
        residency=t.residency.value,
        mode=t.mode.value,
        ack_delay_ns=seconds_arg("--ack-delay", t.ack_delay),
        hold_ns=None if t.hold is None else seconds_arg("--hold", t.hold),
        seed=t.seed,
        burst=t.burst,
    )
    timeline = synthesize(workload, request.workers)
    data = dataclasses.asdict(workload)
    del data["packable"], data["element_sizes"]
    return {"synthetic": data | {"items": list(workload.items)}}, timeline


def _visual(tensor: Any) -> bool:
    """An image or video feature (cuda_vmm packs those of a request into one chunk)."""
    return tensor.item.split()[0].lower() in ("image", "video") if tensor.item else True


def _element_size(tensor: Any) -> int:
    from mmpool_cli.workload.features import DTYPE_BYTES

    return DTYPE_BYTES.get(tensor.dtype, 1)
