"""Traffic -> the leases SGLang 0.5.23 would take: one per pooled tensor of each item of each request.

Reads SGLang server logs, OpenAI body logs or bench_serving's arguments, measures every image
from its header as the family's processor would see it, sizes its pooled tensor as ``plan``
does, and times each lease by SGLang's rule for the family (``leases``). Times start at 0 at the
first request. Pure core: standard library only.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from mmpool_cli.core.words import count as counted
from mmpool_cli.engines.sglang import codes as _codes  # noqa: F401 - its traffic codes join the registry
from mmpool_cli.engines.sglang.traffic import bench, leases, logs
from mmpool_cli.engines.sglang.traffic.video_items import REQUEST_FAILS, VideoSizer
from mmpool_cli.inputs.traffic import openai
from mmpool_cli.inputs.traffic.lines import open_regular
from mmpool_cli.inputs.traffic.model import (
    NS_PER_S,
    Conversion,
    Finding,
    ItemRef,
    Request,
    Summary,
    TrafficError,
    TrafficRequest,
)
from mmpool_cli.inputs.traffic.refs import Decode, Sized, Unsized, measure
from mmpool_cli.inputs.traffic.writer import Lease
from mmpool_cli.simulate.trace import MAX_T_SECONDS
from mmpool_cli.workload.families import Family, FamilyError
from mmpool_cli.workload.features import pooled_tensor
from mmpool_cli.workload.items import Image
from mmpool_cli.workload.qwen import ResizeError

FORMATS = ("auto", "sglang-log", "openai", "bench-serving")
SNIFF_BYTES = 1 << 16
MAX_SPAN_NS = MAX_T_SECONDS * NS_PER_S
MAX_RID_CHARS = 200  # with "/<item>" and a "#<n>" the id stays within the trace's 256 characters


Options = TrafficRequest  # the name the engine's own callers and tests use


@dataclass
class _Req:
    rid: str
    t_ns: int
    where: str
    tensors: list[tuple[int, str]]  # (bytes, item label) per item
    coarse: bool  # a time stamp to the second
    finish_ns: int | None = None
    queue_ns: int | None = None


def sniff(path: str) -> str:
    """The format of the file at ``path`` for ``--from auto``.

    Raises:
        TrafficError: the file cannot be read or its start reads as neither format.
    """
    with open_regular(path) as f:
        first = f.read(SNIFF_BYTES)
    if openai.looks_like(first):
        return "openai"
    if logs.looks_like(first):
        return "sglang-log"
    if not first.strip():
        raise TrafficError(f"{path}: the file is empty: no requests to size")
    raise TrafficError(
        f"{path}: neither an SGLang server log nor JSON-lines chat-completions bodies; "
        "give --from sglang-log or --from openai"
    )


def convert(o: TrafficRequest) -> Conversion:
    """The leases of the traffic ``o`` names.

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
    sizer = _Sizer(o.family, o.settings)
    if "video" in o.family.modalities:
        sizer.videos = VideoSizer(o.family, o.settings, o.environ, o.assume_video)
    reqs: list[_Req] = []
    if o.source == "bench-serving":
        summary.source = "bench-serving"
        plan = bench.requests(o.inputs, o.request_time_ns)
        for r in plan.requests:
            tensors = [sizer.size(w, h, f"bench_serving request {r.index}") for w, h in r.images]
            summary.decoders["nvjpeg" if decode.gpu_jpeg else "pil"] += len(r.images)
            reqs.append(_Req(f"req{r.index}", r.t_ns, f"request {r.index}", tensors, False))
        summary.notes.extend(plan.notes)
        if plan.not_modelled:
            summary.notes.append("arguments that change nothing mmpool models: " + " ".join(plan.not_modelled))
        summary.findings.extend(sizer.findings)
    else:
        # a request's Finish or ReqTimeStats may be in another file (--log-requests-target DIR
        # writes the request log apart from the scheduler's lines)
        finished: dict[str, int] = {}
        queued: dict[str, int] = {}
        for path in o.inputs:
            fmt = sniff(path) if o.source == "auto" else o.source
            if o.source == "auto":
                summary.notes.append(f"{path}: read as {fmt}")
            reqs.extend(_read_file(path, fmt, o, decode, sizer, summary, finished, queued))
        for req in reqs:
            req.finish_ns = finished.get(req.rid)
            req.queue_ns = queued.get(req.rid)
        summary.findings.extend(sizer.findings)
        summary.notes.extend(sizer.videos.notes() if sizer.videos else [])
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


class _Sizer:
    """Image size -> pooled tensor bytes, cached per size (traffic repeats sizes)."""

    def __init__(self, family: Family, settings: dict[str, Any]) -> None:
        self.family = family
        self.settings = settings
        self.cache: dict[tuple[int, int], tuple[int, str] | str] = {}
        self.findings: list[Finding] = []
        self.videos: VideoSizer | None = None

    def size(self, width: int, height: int, where: str) -> tuple[int, str]:
        key = (width, height)
        got = self.cache.get(key)
        if got is None:
            image = Image(width, height)
            try:
                tensor = pooled_tensor(self.family, self.settings, image)
                got = (tensor.bytes, tensor.item)
            except (FamilyError, ResizeError) as e:
                got = str(e)
            self.cache[key] = got
        if isinstance(got, str):
            self.findings.append(Finding(where, "error", "traffic-item-refused", got))
            return 0, ""
        return got


def _read_file(
    path: str,
    fmt: str,
    o: Options,
    decode: Decode,
    sizer: _Sizer,
    summary: Summary,
    finished: dict[str, int],
    queued: dict[str, int],
) -> list[_Req]:
    """The sized requests of one file; its Finish times and queue waits go into ``finished``, ``queued``."""
    out: list[_Req] = []
    records: Iterable[object]
    records = logs.read(path, summary) if fmt == "sglang-log" else openai.read(path, summary)
    for rec in records:
        if isinstance(rec, logs.Finished):
            finished.setdefault(rec.rid, rec.t_ns)
        elif isinstance(rec, logs.Queued):
            queued.setdefault(rec.rid, rec.queue_ns)
        elif isinstance(rec, logs.Problem):
            summary.add(Finding(rec.where, "error", rec.code, rec.message))
        elif isinstance(rec, tuple):
            summary.add(Finding(rec[0], "error", "traffic-body-line", rec[1]))
        elif isinstance(rec, Request):
            if rec.warmup:
                summary.warmup += 1
                continue
            req = _size_request(rec, o, decode, sizer, summary)
            if req is not None:
                req.coarse = rec.coarse
                out.append(req)
    return out


def _size_request(rec: Request, o: Options, decode: Decode, sizer: _Sizer, summary: Summary) -> _Req | None:
    tensors: list[tuple[int, str]] = []
    if not rec.items:
        summary.skipped["requests without images (nothing pooled)"] += 1
        return None
    for i, item in enumerate(rec.items):
        where = f"{rec.where} ({_name(rec, i)})"
        if item.kind == "video" and sizer.videos is not None:
            if any(name.startswith("__") for name in item.fields):
                message = "a video given as an object mmpool cannot read"
                summary.add(Finding(where, "error", "traffic-video-unsized", message))
                continue
            _count_fields(item, o, summary)
            got = sizer.videos.size(item, where, summary)
            if got is REQUEST_FAILS:
                return None  # SGLang fails the whole request: nothing of it is pooled
            if isinstance(got, tuple) and got[0]:
                tensors.append(got)
            continue
        sized = _measure_item(item, o, decode, sizer, summary, where)
        if sized is None:  # already reported
            continue
        if isinstance(sized, Unsized):
            if sized.fails:
                summary.failing += 1
                summary.add(Finding(where, "warning", sized.code or "traffic-request-fails", sized.reason))
                return None
            summary.add(Finding(where, "error", sized.code or "traffic-image-unsized", sized.reason))
            continue
        summary.decoders[sized.decoder] += 1
        nbytes, label = sizer.size(sized.width, sized.height, where)
        if nbytes:
            tensors.append((nbytes, label))
    return _Req(rec.rid, rec.t_ns, rec.where, tensors, False)


def _count_fields(item: ItemRef, o: Options, summary: Summary) -> None:
    for name in item.fields:
        if not name.startswith("__") and o.family.name not in leases.ITEM_FIELDS_USED.get(name, frozenset()):
            summary.ignored_fields[name] += 1


def _name(rec: Request, i: int) -> str:
    return f"request {rec.rid}, item {i}" if rec.rid else f"item {i}"


def _measure_item(
    item: ItemRef, o: Options, decode: Decode, sizer: _Sizer, summary: Summary, where: str
) -> Sized | Unsized | None:
    if item.kind not in o.family.modalities:
        summary.add(
            Finding(
                where,
                "error",
                "traffic-item-refused",
                f"{o.family.name} takes no {item.kind}; it takes {', '.join(o.family.modalities)}",
            )
        )
        return None
    if item.kind != "image":  # audio: no pooled family takes it (videos are sized by video_items)
        summary.add(Finding(where, "error", "traffic-item-refused", f"mmpool sizes no {item.kind} traffic"))
        return None
    for name in item.fields:
        if name.startswith("__"):
            summary.add(
                Finding(where, "error", "traffic-image-unsized", "an image given as an object mmpool cannot read")
            )
            return None
        if o.family.name not in leases.ITEM_FIELDS_USED.get(name, frozenset()):
            summary.ignored_fields[name] += 1
    return measure(item.ref, decode, tail=item.tail, assume=o.assume_image)


def _leases(
    requests: list[_Req], o: TrafficRequest, rule: leases.LeaseRule, summary: Summary, default_delay: bool
) -> Conversion:
    requests.sort(key=lambda r: r.t_ns)  # stable: log order within one time stamp
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
    seen: dict[str, int] = {}
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
        for i, (nbytes, label) in enumerate(r.tensors):
            key = f"{rid}/{i}"
            out.append(Lease(key, t, nbytes, n % o.workers, label, free))
            items[key] = label
            summary.bytes += nbytes
        summary.items += len(r.tensors)
    summary.requests = len(requests)
    summary.allocs = len(out)
    summary.duration_ns = max(lease.free_ns for lease in out)
    if summary.duration_ns > MAX_SPAN_NS:
        raise TrafficError(
            f"{', '.join(summary.files)}: the requests span {summary.duration_ns // NS_PER_S} s, more than a trace "
            f"holds ({MAX_SPAN_NS // NS_PER_S} s); split the input"
        )
    if default_delay and not rule.deferred:
        summary.notes.append(f"receipt delay {leases.DEFAULT_RECV_DELAY_TEXT}; --recv-delay changes it")
    summary.notes.append(f"leases: {rule.why}; requests round-robin over {counted(o.workers, 'tokenizer worker')}")
    return Conversion(out, items, summary)


def _spread(requests: list[_Req]) -> None:
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
