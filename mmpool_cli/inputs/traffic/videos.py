"""A video's frame count, average frame rate and frame size, as SGLang 0.5.23's decoder reports them.

SGLang decodes videos with torchcodec (``utils/video_decoder.py``; decord only where torchcodec
cannot be imported) in its default ``seek_mode="exact"``. ``len(decoder)`` is then
``num_frames_from_content``: the packets of the best video stream that a demux pass returns,
those flagged ``AV_PKT_FLAG_DISCARD`` left out; ``average_fps`` is that count over
``max(pts + duration) - min(pts)`` in seconds, pts being the packet's pts or else its dts
(torchcodec ``SingleStreamDecoder::scanFileAndUpdateMetadataAndIndex`` and
``StreamMetadata::getAverageFps``, the same in 0.13 and 0.17, the release SGLang 0.5.23 pins);
with a zero span it is the header's ``r_frame_rate``. Frames come out turned upright: a display
matrix of ±90° swaps width and height (``Metadata.cpp``, ``rotationFromDegrees``).

mmpool makes the same demux pass with PyAV (FFmpeg's own demuxers, no frame decoded) and reads
the display matrix of MP4/MOV tracks from their ``tkhd`` box, as FFmpeg's mov demuxer builds it.
PyAV is optional (the ``video`` extra); it is imported only when a video is read.
"""

from __future__ import annotations

import dataclasses
import math
import struct
from dataclasses import dataclass
from typing import Any, BinaryIO

MAX_BOXES = 100_000  # an MP4 with more boxes before its video track is malformed, not large


# mmpool is on no package index: the requirement itself, and the extra from a checkout (as for Ray, Parquet)
VIDEO_EXTRA = "pip install 'av>=14' (or, from an mmpool checkout, pip install '.[video]')"


class VideoError(ValueError):
    """A video mmpool cannot read: the message says why. ``fails``: the server's decoder fails too."""

    def __init__(self, message: str, fails: bool = False) -> None:
        super().__init__(message)
        self.fails = fails


@dataclass(frozen=True)
class VideoInfo:
    """What the decoder reports of a video: frames, average rate, and the size of its frames."""

    width: int  # of a decoded frame, after the display rotation
    height: int
    frames: int  # len(VideoDecoder(...)) in exact seek mode
    average_fps: float  # VideoDecoder.metadata.average_fps, a C double
    rotation: int  # the display rotation rounded to a multiple of 90 degrees (0: none)
    container: str  # FFmpeg's name of the demuxer, e.g. "mov,mp4,m4a,3gp,3g2,mj2"
    # packet durations differ and frames come out of decode order (B-frames): FFmpeg releases
    # have given such MP4s different packet durations, so the server's FFmpeg may see another rate
    rate_depends_on_demuxer: bool = False


def _av() -> Any:
    try:
        import av
    except ImportError:
        raise VideoError(
            f"reading a video's container needs PyAV, which is not installed: {VIDEO_EXTRA}"
        ) from None
    return av


def ffmpeg_version() -> str:
    """The FFmpeg release PyAV bundles (what demuxes the videos), or "" without PyAV."""
    try:
        import av
    except ImportError:
        return ""
    return str(getattr(av, "ffmpeg_version_info", ""))


def probe(source: BinaryIO) -> VideoInfo:
    """Frames, average rate and frame size of the video whose bytes ``source`` reads (seekable).

    Raises:
        VideoError: no PyAV, not a container FFmpeg reads, no video stream, no frames, or
            packets without time stamps (SGLang's decoder fails on each but the first).
    """
    av = _av()
    try:
        container = av.open(source, mode="r")
    except Exception as e:  # noqa: BLE001 - FFmpeg's refusal of the bytes, whatever its type
        raise VideoError(f"not a video FFmpeg can open ({_why(e)})", fails=True) from None
    try:
        info, index = _scan(container)
    except VideoError:
        raise
    except Exception as e:  # noqa: BLE001 - a demuxer error part-way through the file
        raise VideoError(f"FFmpeg cannot read the video to its end ({_why(e)})", fails=True) from None
    finally:
        container.close()
    rotation = _mov_rotation(source, index) if "mov" in info.container.split(",") else 0
    if rotation in (90, -90):
        return dataclasses.replace(info, width=info.height, height=info.width, rotation=rotation)
    return dataclasses.replace(info, rotation=rotation)


def _why(e: BaseException) -> str:
    strerror = getattr(e, "strerror", None)  # FFmpeg's own words, without PyAV's errno and file name
    text = str(strerror) if strerror else str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
    return text[:200]


def _scan(container: Any) -> tuple[VideoInfo, int]:
    try:
        stream = container.streams.best("video")
    except Exception:  # noqa: BLE001
        stream = None
    if stream is None:
        raise VideoError("no video stream in the container", fails=True)
    index = stream.index
    count = 0
    lo: int | None = None
    hi: int | None = None
    durations: set[int] = set()
    last_pts: int | None = None
    reordered = False
    # demux() reads every stream's packets, as av_read_frame does in torchcodec's scan; after the
    # end of the file it yields one empty flush packet per stream, which a demuxer never returns
    for packet in container.demux():
        if packet.stream_index != index:
            continue
        if packet.pts is None and packet.dts is None:
            if packet.size == 0:
                continue  # PyAV's flush packet
            raise VideoError("a video packet without a time stamp: its frame rate cannot be told", fails=True)
        if packet.is_discard:
            continue
        t = packet.pts if packet.pts is not None else packet.dts
        duration = packet.duration or 0
        lo = t if lo is None else min(lo, t)
        hi = t + duration if hi is None else max(hi, t + duration)
        count += 1
        durations.add(duration)
        if last_pts is not None and t < last_pts:
            reordered = True
        last_pts = t
    if count == 0 or lo is None or hi is None:
        raise VideoError("the video stream holds no frames", fails=True)
    tb = stream.time_base
    begin = float(lo) * tb.numerator / tb.denominator  # torchcodec ptsToSeconds
    end = float(hi) * tb.numerator / tb.denominator
    if end - begin != 0.0:
        fps = float(count) / (end - begin)
    else:
        rate = stream.base_rate  # r_frame_rate: averageFpsFromHeader
        if rate is None or rate <= 0:
            raise VideoError("the video's frames span no time and its header states no frame rate", fails=True)
        fps = rate.numerator / float(rate.denominator)
    width, height = int(stream.codec_context.width), int(stream.codec_context.height)
    if width <= 0 or height <= 0:
        raise VideoError(f"the video stream states no frame size ({width}x{height})", fails=True)
    name = str(container.format.name)
    varies = len(durations) > 1 and reordered and "mov" in name.split(",")
    return VideoInfo(width, height, count, fps, 0, name, varies), index


def _boxes(f: BinaryIO, start: int, end: int) -> list[tuple[bytes, int, int]]:
    """The ISO-BMFF boxes between ``start`` and ``end``: ``(type, body start, box end)``."""
    out: list[tuple[bytes, int, int]] = []
    pos = start
    while pos + 8 <= end and len(out) < MAX_BOXES:
        f.seek(pos)
        head = f.read(16)
        if len(head) < 8:
            break
        size, kind = struct.unpack(">I4s", head[:8])
        body = pos + 8
        if size == 1:
            if len(head) < 16:
                break
            (size,) = struct.unpack(">Q", head[8:16])
            body = pos + 16
        elif size == 0:
            size = end - pos
        if size < body - pos:
            break
        out.append((kind, body, min(pos + size, end)))
        pos += size
    return out


def _matrix(f: BinaryIO, body: int, end: int, kind: bytes) -> list[int] | None:
    """The 3x3 matrix of an ``mvhd`` or ``tkhd`` box, as nine integers (FFmpeg ``mov_read_*hd``)."""
    f.seek(body)
    version = f.read(1)
    if not version:
        return None
    long = version[0] == 1
    # mvhd: flags 3, times 8/16, timescale 4, duration 4/8, rate 4, volume 2, reserved 10
    # tkhd: flags 3, times 8/16, track id 4, reserved 4, duration 4/8, reserved 8, layer 2,
    #       group 2, volume 2, reserved 2
    offset = 1 + 3 + (16 if long else 8) + 4 + (8 if long else 4) + (4 + 2 + 10 if kind == b"mvhd" else 4 + 16)
    f.seek(body + offset)
    raw = f.read(36)
    if body + offset + 36 > end or len(raw) < 36:
        return None
    return list(struct.unpack(">9i", raw))


def _mov_rotation(f: BinaryIO, index: int) -> int:
    """The display rotation of the ``index``-th track of an MP4/MOV, rounded as torchcodec rounds it."""
    f.seek(0, 2)
    size = f.tell()
    moov = next(((b, e) for k, b, e in _boxes(f, 0, size) if k == b"moov"), None)
    if moov is None:
        return 0
    children = _boxes(f, *moov)
    movie = next((_matrix(f, b, e, b"mvhd") for k, b, e in children if k == b"mvhd"), None)
    traks = [(b, e) for k, b, e in children if k == b"trak"]
    if index >= len(traks):
        return 0
    tkhd = next(((b, e) for k, b, e in _boxes(f, *traks[index]) if k == b"tkhd"), None)
    track = None if tkhd is None else _matrix(f, tkhd[0], tkhd[1], b"tkhd")
    if track is None:
        return 0
    matrix = _combine(track, movie) if movie is not None else track
    return _round_rotation(_rotation_degrees(matrix))


def _combine(track: list[int], movie: list[int]) -> list[int]:
    """FFmpeg ``mov_read_tkhd``: the track matrix times the movie's, each product shifted back to fixed point."""
    shift = (16, 16, 30)  # rows 0-1 are 16.16, the last column 2.30
    out = []
    for i in range(3):
        for j in range(3):
            total = 0
            for e in range(3):
                total += (track[3 * i + e] * movie[3 * e + j]) >> shift[e]
            out.append(((total + 2**31) % 2**32) - 2**31)  # kept as int32
    return out


def _rotation_degrees(m: list[int]) -> float | None:
    """``av_display_rotation_get``: the counter-clockwise rotation that makes the frame upright."""

    def conv(x: int) -> float:
        return x / 65536.0

    scale0 = math.hypot(conv(m[0]), conv(m[3]))
    scale1 = math.hypot(conv(m[1]), conv(m[4]))
    if scale0 == 0.0 or scale1 == 0.0:
        return None
    rotation = math.atan2(conv(m[1]) / scale1, conv(m[0]) / scale0) * 180 / math.pi
    return -rotation


def _round_rotation(degrees: float | None) -> int:
    """torchcodec ``rotationFromDegrees``: the nearest multiple of 90 (C ``round``: half away from 0)."""
    if degrees is None or math.isnan(degrees):
        return 0
    q = degrees / 90.0
    rounded = int(math.floor(abs(q) + 0.5)) * (1 if q >= 0 else -1) * 90
    if rounded == -180:
        rounded = 180
    if rounded not in (0, 90, -90, 180):
        raise VideoError(f"a display rotation of {degrees:g} degrees, outside [-180, 180]", fails=True)
    return rounded
