"""One traffic file -> its sized requests, read alone: the part of a conversion that runs per file.

``read_part`` reads one file into a ``FilePart`` that holds everything the file adds to the
conversion (its requests, their Finish times and queue waits, its counts, notes and findings), so
the files of a fleet can be read in any order, on any machine, and merged by ``convert`` in the
order given, as if read one after another. Pure core: standard library only.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from mmpool_cli.engines.sglang.traffic import leases, logs
from mmpool_cli.engines.sglang.traffic.video_items import REQUEST_FAILS, VideoSizer
from mmpool_cli.errors import MmpoolError
from mmpool_cli.inputs.traffic import openai
from mmpool_cli.inputs.traffic.content_key import content_key
from mmpool_cli.inputs.traffic.lines import open_regular
from mmpool_cli.inputs.traffic.model import (
    Finding,
    ItemRef,
    Request,
    Summary,
    TrafficError,
    TrafficRequest,
)
from mmpool_cli.inputs.traffic.prompts import Prompt
from mmpool_cli.inputs.traffic.refs import IMAGE_EXTENSIONS, Decode, Sized, Unsized, measure
from mmpool_cli.workload.families import Family, FamilyError
from mmpool_cli.workload.features import pooled_tensor
from mmpool_cli.workload.items import Image
from mmpool_cli.workload.qwen import ResizeError

SNIFF_BYTES = 1 << 16


@dataclass
class Req:
    rid: str
    t_ns: int
    where: str
    tensors: list[tuple[int, str]]  # (bytes, item label) per item
    coarse: bool  # a time stamp to the second
    finish_ns: int | None = None
    queue_ns: int | None = None
    keys: list[str | None] | None = None  # each tensor's item's content key (None: not known)
    prompt: Prompt | None = None  # its prompt, where the source carries it (the prefix cache's replay)


@dataclass
class FilePart:
    """What one file adds to a conversion; plain data, so that it travels between processes."""

    path: str
    fmt: str  # the format it was read as
    reqs: list[Req] = field(default_factory=list)
    finished: dict[str, int] = field(default_factory=dict)  # rid -> its first Finish in the file
    usage: dict[str, tuple[int | None, int | None, int | None]] = field(default_factory=dict)  # rid -> its Finish's
    queued: dict[str, int] = field(default_factory=dict)  # rid -> its first ReqTimeStats queue wait
    summary: Summary | None = None  # the file's counts, notes and located findings
    sized: list[Finding] = field(default_factory=list)  # the sizer's findings, reported after every file's own
    videos: Counter[str] = field(default_factory=Counter)  # videos measured, by how
    error: tuple[str, list[Finding], int] | None = None  # what stopped the reading: message, findings, exit code

    def raise_error(self) -> None:
        """Raise what stopped this file's reading, as reading it here would have."""
        if self.error is not None:
            message, findings, code = self.error
            error = TrafficError(message, findings)
            error.exit_code = code
            raise error


def read_part(path: str, o: TrafficRequest) -> FilePart:
    """The file at ``path`` read alone; an error that stops it is kept in the part, not raised."""
    summary = Summary(engine="SGLang", source=o.source, files=[path])
    sizer = Sizer(o.family, o.settings)
    if "video" in o.family.modalities:
        sizer.videos = VideoSizer(o.family, o.settings, o.environ, o.assume_video)
    part = FilePart(path, o.source, summary=summary, sized=sizer.findings)
    try:
        part.fmt = sniff(path) if o.source == "auto" else o.source
        decode = leases.decode_mode(o.family.name, o.environ)
        part.reqs = _read_file(path, part.fmt, o, decode, sizer, summary, part.finished, part.queued, part.usage)
    except MmpoolError as e:
        part.error = (str(e), list(getattr(e, "findings", [])), e.exit_code)
    if sizer.videos is not None:
        part.videos = sizer.videos.measured
    return part


def absorb(total: Summary, part: Summary) -> None:
    """Add what one file's reading counted to ``total`` (the fields ``read_part`` fills)."""
    total.warmup += part.warmup
    total.failing += part.failing
    total.skipped.update(part.skipped)
    total.decoders.update(part.decoders)
    total.ignored_fields.update(part.ignored_fields)
    total.notes.extend(part.notes)
    total.findings.extend(part.findings)


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
        "give --from-format sglang-log or --from-format openai"
    )


class Sizer:
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
    o: TrafficRequest,
    decode: Decode,
    sizer: Sizer,
    summary: Summary,
    finished: dict[str, int],
    queued: dict[str, int],
    usage: dict[str, tuple[int | None, int | None, int | None]] | None = None,
) -> list[Req]:
    """The sized requests of one file; its Finish times and queue waits go into ``finished``, ``queued``."""
    out: list[Req] = []
    records: Iterable[object]
    records = logs.read(path, summary) if fmt == "sglang-log" else openai.read(path, summary)
    seen: dict[str, tuple[Sized, str | None, tuple[int, str]]] = {}  # an inline image's measure, key, tensor
    for rec in records:
        if isinstance(rec, Request):  # first: nearly every record is one
            if rec.warmup:
                summary.warmup += 1
                continue
            req = _size_request(rec, o, decode, sizer, summary, seen)
            if req is not None:
                req.coarse = rec.coarse
                out.append(req)
        elif isinstance(rec, logs.Finished):
            finished.setdefault(rec.rid, rec.t_ns)
            if usage is not None and rec.usage != (None, None, None):
                usage.setdefault(rec.rid, rec.usage)
        elif isinstance(rec, logs.Queued):
            queued.setdefault(rec.rid, rec.queue_ns)
        elif isinstance(rec, logs.Problem):
            summary.add(Finding(rec.where, "error", rec.code, rec.message))
        elif isinstance(rec, tuple):
            summary.add(Finding(rec[0], "error", "traffic-body-line", rec[1]))
    return out


def _size_request(
    rec: Request,
    o: TrafficRequest,
    decode: Decode,
    sizer: Sizer,
    summary: Summary,
    seen: dict[str, tuple[Sized, str | None, tuple[int, str]]] | None = None,
) -> Req | None:
    """``rec``'s items sized and keyed. ``seen``: the inline images sized before (a chat re-sends its images
    with every turn), by their whole data: the same text measures, sizes and keys alike, so it is read once."""
    tensors: list[tuple[int, str]] = []
    keys: list[str | None] = []
    if not rec.items:
        summary.skipped["requests without images (nothing pooled)"] += 1
        return None
    decoders = summary.decoders
    for i, item in enumerate(rec.items):
        known = seen.get(item.ref) if seen is not None and item.tail is None else None
        if known is not None and item.kind == "image" and not item.fields:
            # what the steps below do for an image sized before, with no field to count
            decoders[known[0].decoder] += 1
            tensors.append(known[2])
            keys.append(known[1])
            continue
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
                keys.append(content_key(item.ref, item.tail, any_file=True))
            continue
        inline = seen is not None and item.tail is None and item.ref.startswith("data:")
        sized = _measure_item(item, o, decode, sizer, summary, where, None if known is None else known[0])
        if sized is None:  # already reported
            continue
        if isinstance(sized, Unsized):
            if sized.fails:
                summary.failing += 1
                summary.add(Finding(where, "warning", sized.code or "traffic-request-fails", sized.reason))
                return None
            summary.add(Finding(where, "error", sized.code or "traffic-image-unsized", sized.reason))
            continue
        decoders[sized.decoder] += 1
        nbytes, label = sizer.size(sized.width, sized.height, where)
        if nbytes:
            tensors.append((nbytes, label))
            if known is None:
                known = (sized, content_key(item.ref, item.tail, extensions=IMAGE_EXTENSIONS), (nbytes, label))
                if inline and seen is not None:
                    seen[item.ref] = known
            keys.append(known[1])
    return Req(rec.rid, rec.t_ns, rec.where, tensors, False, keys=keys, prompt=rec.prompt)


def _count_fields(item: ItemRef, o: TrafficRequest, summary: Summary) -> None:
    for name in item.fields:
        if not name.startswith("__") and o.family.name not in leases.ITEM_FIELDS_USED.get(name, frozenset()):
            summary.ignored_fields[name] += 1


def _name(rec: Request, i: int) -> str:
    return f"request {rec.rid}, item {i}" if rec.rid else f"item {i}"


def _measure_item(
    item: ItemRef,
    o: TrafficRequest,
    decode: Decode,
    sizer: Sizer,
    summary: Summary,
    where: str,
    measured: Sized | Unsized | None = None,
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
    return measured if measured is not None else measure(item.ref, decode, tail=item.tail, assume=o.assume_image)
