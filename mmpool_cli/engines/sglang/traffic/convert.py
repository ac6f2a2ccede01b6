"""Traffic -> the leases SGLang 0.5.23 would take: one per pooled tensor of each item of each request.

Reads SGLang server logs, OpenAI body logs or bench_serving's arguments, measures every image
from its header as the family's processor would see it, sizes its pooled tensor as ``plan``
does, and times each lease by SGLang's rule for the family (``leases``). Times start at 0 at the
first request. Pure core: standard library only.
"""

from __future__ import annotations

import dataclasses
import functools
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from operator import attrgetter

from mmpool_cli.core.words import count as counted
from mmpool_cli.engines.sglang import codes as _codes  # noqa: F401 - its traffic codes join the registry
from mmpool_cli.engines.sglang.traffic import bench, leases, logs
from mmpool_cli.engines.sglang.traffic.files import FilePart, Req, Sizer, absorb, read_part, sniff
from mmpool_cli.engines.sglang.traffic.video_items import VideoSizer
from mmpool_cli.inputs.traffic.model import (
    NS_PER_S,
    Conversion,
    FileMap,
    Finding,
    Summary,
    TrafficError,
    TrafficRequest,
)
from mmpool_cli.inputs.traffic.prompts import Timed
from mmpool_cli.inputs.traffic.writer import Lease
from mmpool_cli.traces.reader import MAX_T_SECONDS

__all__ = ["FORMATS", "Options", "convert", "sniff"]

FORMATS = ("auto", "sglang-log", "openai", "bench-serving")
MAX_SPAN_NS = MAX_T_SECONDS * NS_PER_S
MAX_RID_CHARS = 200  # with "/<item>" and a "#<n>" the id stays within the trace's 256 characters


Options = TrafficRequest  # the name the engine's own callers and tests use


def convert(o: TrafficRequest, map_files: FileMap | None = None) -> Conversion:
    """The leases of the traffic ``o`` names; ``map_files`` reads its files (default: one after another here).

    Each file is read alone (``files.read_part``) and the parts merged in the order of ``o.inputs``,
    so any ``map_files`` that gives the parts in that order gives the same conversion.

    Raises:
        TrafficError: no usable request, a log that cannot be sized (levels 0/1), or located errors.
    """
    if o.source not in FORMATS:
        raise TrafficError(f"--from {o.source}: choose one of {', '.join(FORMATS)}")
    if o.recv_delay_ns is None:
        o = dataclasses.replace(o, recv_delay_ns=leases.DEFAULT_RECV_DELAY_NS)
        default_delay = True
    else:
        default_delay = False
    rule = leases.lease_rule(o.family.name, o.tp_size, o.dp_encoder)
    decode = leases.decode_mode(o.family.name, o.environ)
    summary = Summary(
        engine="SGLang", source=o.source, files=list(o.inputs) if o.source != "bench-serving" else ["bench_serving"]
    )
    sizer = Sizer(o.family, o.settings)
    if "video" in o.family.modalities:
        sizer.videos = VideoSizer(o.family, o.settings, o.environ, o.assume_video)
    reqs: list[Req] = []
    if o.source == "bench-serving":
        summary.source = "bench-serving"
        plan = bench.requests(o.inputs, o.request_time_ns)
        for r in plan.requests:
            tensors = [sizer.size(w, h, f"bench_serving request {r.index}") for w, h in r.images]
            summary.decoders["nvjpeg" if decode.gpu_jpeg else "pil"] += len(r.images)
            reqs.append(Req(f"req{r.index}", r.t_ns, f"request {r.index}", tensors, False))
        summary.notes.extend(plan.notes)
        if plan.not_modelled:
            summary.notes.append("arguments that change nothing mmpool models: " + " ".join(plan.not_modelled))
        summary.findings.extend(sizer.findings)
    else:
        # a request's Finish or ReqTimeStats may be in another file (--log-requests-target DIR
        # writes the request log apart from the scheduler's lines): the first in the files' order counts
        finished: dict[str, int] = {}
        queued: dict[str, int] = {}
        usage: dict[str, tuple[int | None, int | None, int | None]] = {}
        measured: Counter[str] = Counter()
        sized: list[Finding] = []
        shipped = dataclasses.replace(o, environ=dict(o.environ))  # plain data, for another process
        for part in (map_files or _here)(functools.partial(read_part, o=shipped), list(o.inputs)):
            part.raise_error()  # the first file in order that cannot be read stops it, as read one by one
            if o.source == "auto":
                summary.notes.append(f"{part.path}: read as {part.fmt}")
            assert part.summary is not None
            absorb(summary, part.summary)
            reqs.extend(part.reqs)
            for rid, t_ns in part.finished.items():
                finished.setdefault(rid, t_ns)
            for rid, queue_ns in part.queued.items():
                queued.setdefault(rid, queue_ns)
            for rid, given in part.usage.items():
                usage.setdefault(rid, given)
            sized.extend(part.sized)
            measured.update(part.videos)
        for req in reqs:
            req.finish_ns = finished.get(req.rid)
            req.queue_ns = queued.get(req.rid)
            told = usage.get(req.rid)
            if told is not None and req.prompt is not None:  # what the server said of its prompt and output
                prompt_tokens, output_tokens, cached = told
                req.prompt = dataclasses.replace(
                    req.prompt, prompt_tokens=prompt_tokens, output_tokens=output_tokens, cached_tokens=cached
                )
        summary.findings.extend(sized)
        if sizer.videos is not None:
            sizer.videos.measured = measured
            summary.notes.extend(sizer.videos.notes())
    summary.raise_errors()
    requests = [r for r in reqs if r.tensors]
    if not requests:
        what = "no request with an image or a video the pool would take"
        if summary.skipped.get("Receive without image_data (--log-requests-level 0 or 1)"):
            raise TrafficError(
                f"{', '.join(summary.files)}: the log was written at --log-requests-level 0 or 1, which drop "
                f"image_data, so its requests cannot be sized; {logs.LEVELS_HINT}"
            )
        raise summary.unusable(what)
    return _leases(requests, o, rule, summary, default_delay)


def _leases(
    requests: list[Req], o: TrafficRequest, rule: leases.LeaseRule, summary: Summary, default_delay: bool
) -> Conversion:
    requests.sort(key=attrgetter("t_ns"))  # stable: log order within one time stamp
    coarse = [r for r in requests if r.coarse]
    if coarse:
        _spread(requests)
        summary.notes.append(
            f"{counted(len(coarse), 'request')} {'carries' if len(coarse) == 1 else 'carry'} whole-second times "
            "(the text log's format): the requests of each "
            "second are spread evenly across it; --log-requests-format json gives microseconds"
        )
    t0 = requests[0].t_ns
    out: list[Lease] = []
    items: dict[object, str] = {}
    keys: dict[object, str] = {}
    seen: dict[str, int] = {}
    prompts: dict[str, Timed] = {}
    latest: int | None = None  # the last free (every request has a tensor: its free is its leases')
    for n, r in enumerate(requests):
        t = r.t_ns - t0
        receipt = t + (o.recv_delay_ns or 0)
        if not rule.deferred:
            free, why = receipt, "eager: acknowledged on receipt"
        elif r.queue_ns is not None:
            free, why = receipt + r.queue_ns, "deferred: ReqTimeStats queue_duration"
        elif r.finish_ns is not None:
            free, why = max(receipt, r.finish_ns - t0), "deferred: held until its Finish"
        elif o.hold_ns is not None:
            free, why = t + o.hold_ns, "deferred: --hold"
        else:
            raise TrafficError(
                f"{r.where}: {rule.why}, and the log has neither its ReqTimeStats line "
                "(--enable-request-time-stats-logging) nor its Finish line; give --hold SECONDS"
            )
        summary.lifetimes[why] += 1
        if latest is None or free > latest:
            latest = free
        rid = r.rid
        if not rid or len(rid) > MAX_RID_CHARS:
            rid = f"line{r.where.rsplit(':', 1)[-1]}"
            if r.rid:
                summary.add(
                    Finding(
                        r.where,
                        "warning",
                        "traffic-long-id",
                        f"a request id of {len(r.rid)} characters; named {rid} in the trace",
                    )
                )
        count = seen.get(rid, 0) + 1
        seen[rid] = count
        if count > 1:
            rid = f"{rid}#{count}"
        prompts[rid] = Timed(r.prompt, t, None if r.finish_ns is None else max(t, r.finish_ns - t0))
        for i, (nbytes, label) in enumerate(r.tensors):
            key = f"{rid}/{i}"
            content = r.keys[i] if r.keys else None
            out.append(Lease(key, t, nbytes, n % o.workers, label, free, content))
            items[key] = label
            if content is not None:
                keys[key] = content
            summary.bytes += nbytes
        summary.items += len(r.tensors)
    summary.requests = len(requests)
    summary.allocs = len(out)
    assert latest is not None  # (requests is not empty)
    summary.duration_ns = latest
    if summary.duration_ns > MAX_SPAN_NS:
        raise TrafficError(
            f"{', '.join(summary.files)}: the requests span {summary.duration_ns // NS_PER_S} s, more than a trace "
            f"holds ({MAX_SPAN_NS // NS_PER_S} s); split the input"
        )
    if default_delay and not rule.deferred:
        summary.notes.append(f"receipt delay {leases.DEFAULT_RECV_DELAY_TEXT}; --recv-delay changes it")
    summary.notes.append(f"leases: {rule.why}; requests round-robin over {counted(o.workers, 'tokenizer worker')}")
    return Conversion(out, items, summary, keys, prompts)


def _here(read: Callable[[str], FilePart], paths: Sequence[str]) -> Iterable[FilePart]:
    return map(read, paths)


def _spread(requests: list[Req]) -> None:
    """Spread the requests that share one whole-second stamp evenly across that second."""
    i = 0
    while i < len(requests):
        j = i
        while j < len(requests) and requests[j].t_ns == requests[i].t_ns and requests[j].coarse:
            j += 1
        n = j - i
        for k in range(i, j):
            requests[k].t_ns += (k - i) * NS_PER_S // n
        i = max(j, i + 1)
