"""A request's video item -> the bytes of the tensor SGLang 0.5.23 pools for it.

The container says what torchcodec reports (``inputs.traffic.videos``: frames, average rate and
the upright frame size); ``preprocess_video`` (``multimodal/processors/qwen_vl.py:248-328``)
samples at 2 fps between its frame bounds and resizes within ``VIDEO_MIN_PIXELS``,
``VIDEO_MAX_PIXELS`` and ``VIDEO_TOTAL_PIXELS`` (the ``VIDEO_MAX_PIXELS`` environment variable,
read at import, :69-71); then the family's video processor resizes again. Both are
``workload.qwen.video_shape``, the code ``plan --video`` runs. Per-item fields do not reach the
Qwen processors: ``preprocess_video`` reads the server's ``--mm-process-config`` video section
only, and ``load_video`` drops a ``VideoData``'s ``preprocess_kwargs`` (``utils/common.py:2245-2248``,
GLM-4V reads them), so ``fps``, ``max_frames`` and the rest are counted as ignored.
Pure core: standard library only.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from fractions import Fraction
from typing import Any

from mmpool_cli.core.words import count
from mmpool_cli.inputs.traffic.model import Finding, ItemRef, Summary
from mmpool_cli.inputs.traffic.video_refs import MeasuredVideo, VideoReader
from mmpool_cli.inputs.traffic.videos import VideoInfo, ffmpeg_version
from mmpool_cli.workload.families import Family, FamilyError
from mmpool_cli.workload.features import pooled_tensor
from mmpool_cli.workload.items import Video
from mmpool_cli.workload.qwen import ResizeError
from mmpool_cli.workload.video_env import video_total_pixels

REQUEST_FAILS = object()  # size()'s answer for an item SGLang fails the whole request on


def label(info: VideoInfo) -> str:
    """How a measured video is named in the trace: ``video 1280x720 300 frames at 29.97 fps``."""
    return f"video {info.width}x{info.height} {info.frames} frames at {info.average_fps:.6g} fps"


def as_video(info: VideoInfo) -> Video:
    """The video as ``workload`` sizes it: exactly ``info.frames`` frames at the decoder's float rate."""
    fps = Fraction(info.average_fps)  # the C double torchcodec returns, exactly
    return Video(info.width, info.height, Fraction(info.frames) / fps, fps)


class VideoSizer:
    """Video items -> pooled bytes for one family, cached per measured video."""

    def __init__(
        self, family: Family, settings: Mapping[str, Any], environ: Mapping[str, str], assume: Video | None
    ) -> None:
        self.family = family
        self.settings = dict(settings)
        if "max_frames" in self.settings and "video_total_pixels" not in self.settings:
            self.settings["video_total_pixels"] = video_total_pixels(environ)  # as plan reads it
        self.reader = VideoReader(assume)
        self.sizes: dict[object, tuple[int, str] | str] = {}
        self.measured: Counter[str] = Counter()

    def size(self, item: ItemRef, where: str, summary: Summary) -> tuple[int, str] | object | None:
        """The item's pooled ``(bytes, label)``; None when it is reported in ``summary`` instead,
        ``REQUEST_FAILS`` when SGLang fails the request on it (reported as a warning)."""
        got = self.reader.measure(item.ref, item.tail)
        if not isinstance(got, MeasuredVideo):
            if got.fails:
                summary.failing += 1
                summary.add(Finding(where, "warning", got.code or "traffic-request-fails", got.reason))
                return REQUEST_FAILS
            summary.add(Finding(where, "error", got.code or "traffic-video-unsized", got.reason))
            return None
        if got.info is not None:
            self.measured["container"] += 1
            if got.info.rate_depends_on_demuxer:
                summary.add(
                    Finding(
                        where,
                        "warning",
                        "traffic-video-rate-varies",
                        f"{label(got.info)}: a variable frame rate with B-frames in MP4/MOV, whose packet "
                        f"durations FFmpeg releases have read differently; sized with FFmpeg {ffmpeg_version()}'s "
                        "average rate, which the server's FFmpeg may not share",
                    )
                )
            video, name = as_video(got.info), label(got.info)
            key: object = got.info
        else:
            assert got.assumed is not None
            self.measured["assumed"] += 1
            video, name, key = got.assumed, got.assumed.label, got.assumed
        found = self.sizes.get(key)
        if found is None:
            try:
                found = (pooled_tensor(self.family, self.settings, video).bytes, name)
            except (FamilyError, ResizeError) as e:
                found = f"{name}: {e}"
            self.sizes[key] = found
        if isinstance(found, str):
            summary.add(Finding(where, "error", "traffic-item-refused", found))
            return None
        return found

    def notes(self) -> list[str]:
        """What the summary says of the videos read."""
        out = []
        if self.measured["container"]:
            out.append(
                f"{count(self.measured['container'], 'video')} measured from the container, frames and average "
                "rate as torchcodec's exact scan counts them (SGLang's decoder), no frame decoded; with "
                f"FFmpeg {ffmpeg_version()} (PyAV's, which varies with the PyAV installed)"
            )
        if self.measured["assumed"]:
            out.append(f"{count(self.measured['assumed'], 'http(s) video')} given --assume-video's size")
        return out
