"""The flags that turn users' traffic into leases, shared by ``trace`` and ``simulate --from``."""

from __future__ import annotations

import os
from collections.abc import Mapping
from decimal import Decimal, InvalidOperation
from enum import StrEnum
from typing import TYPE_CHECKING, Annotated, Any

import typer

from mmpool_cli.errors import MmpoolError

if TYPE_CHECKING:
    from mmpool_cli.inputs.traffic.model import Conversion, FileMap
    from mmpool_cli.workload.items import Video

NS_PER_S = 10**9
MAX_SECONDS = 10**6
DEFAULT_RECV_DELAY = "0.02"


class SourceChoice(StrEnum):
    auto = "auto"
    sglang_log = "sglang-log"
    openai = "openai"
    bench_serving = "bench-serving"


def seconds(flag: str, text: str) -> int:
    """Non-negative seconds as whole nanoseconds; anything else is a usage error."""
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


def image_size(flag: str, text: str) -> tuple[int, int]:
    from mmpool_cli.workload.items import ItemError, parse_image

    try:
        image = parse_image(text)
    except ItemError as e:
        raise MmpoolError(str(e).replace("--image", flag, 1)) from None
    return image.width, image.height


def video_item(flag: str, text: str) -> Video:
    from mmpool_cli.workload.items import ItemError, parse_video

    try:
        return parse_video(text)
    except ItemError as e:
        raise MmpoolError(str(e).replace("--video", flag, 1)) from None


DpEncoderOpt = Annotated[
    bool,
    typer.Option("--mm-enable-dp-encoder", help="The server ran with --mm-enable-dp-encoder (deferred leases)."),
]
AssumeImageOpt = Annotated[
    str | None,
    typer.Option("--assume-image", metavar="WxH", help="Size to give http(s) image URLs (never fetched)."),
]
AssumeVideoOpt = Annotated[
    str | None,
    typer.Option(
        "--assume-video",
        metavar="WxH:SECONDS:FPS",
        help="What http(s) video URLs are taken to be (never fetched); or WxH:FRAMES@FPS.",
    ),
]
RequestTimeOpt = Annotated[
    str,
    typer.Option(
        "--request-time", metavar="SECONDS", help="bench-serving with --max-concurrency: each request's time."
    ),
]


def convert(
    *,
    model: str | None,
    source: SourceChoice,
    inputs: list[str],
    workers: int,
    tp: int,
    dp_encoder: bool,
    recv_delay_ns: int | None,
    hold_ns: int | None,
    assume_image: str | None,
    request_time: str,
    assume_video: str | None = None,
    overrides: Mapping[str, Any] | None = None,
    override_flags: Mapping[str, str] | None = None,
    map_files: FileMap | None = None,
) -> Conversion:
    """Read the traffic and return its Conversion (leases, item names, summary).

    Raises:
        MmpoolError: a usage error or traffic that cannot be sized (exit 2).
    """
    from mmpool_cli.inputs.traffic.model import TrafficRequest
    from mmpool_cli.usecases.trace import resolve_model, trace

    if not inputs:  # before the model: say what is missing first
        what = "bench_serving's arguments after --" if source is SourceChoice.bench_serving else "a log FILE"
        raise MmpoolError(f"no input: give {what}")
    family, settings = resolve_model(model, overrides or {}, override_flags or {})
    request = TrafficRequest(
        family=family,
        settings=settings,
        source=source.value,
        inputs=list(inputs),
        workers=workers,
        tp_size=tp,
        dp_encoder=dp_encoder,
        recv_delay_ns=recv_delay_ns,
        hold_ns=hold_ns,
        assume_image=None if assume_image is None else image_size("--assume-image", assume_image),
        assume_video=None if assume_video is None else video_item("--assume-video", assume_video),
        request_time_ns=seconds("--request-time", request_time),
        environ=os.environ,
    )
    return trace(request, map_files=map_files)
