"""How a video is measured, where a wrong branch would still pass the recorded files: packets an MP4
edit list marks to discard, a span whose latest packet is not the last in decode order (B-frames),
and a clip with fewer frames than SGLang's sampling asks for. Each file is made here with FFmpeg to
reach its branch (and checked to reach it); the expected figures are worked out by hand below, and
compared with torchcodec's own answer where it runs (SGLang 0.5.23 decodes with it).
"""

from __future__ import annotations

import json
import shutil
import subprocess
from fractions import Fraction
from pathlib import Path

import pytest

from mmpool_cli.engines.sglang.traffic.convert import Options, convert
from mmpool_cli.workload.families import family
from mmpool_cli.workload.features import _qwen_params
from mmpool_cli.workload.qwen import video_frames
from mmpool_cli.workload.video_env import video_total_pixels

av = pytest.importorskip("av", reason="PyAV (pip install 'mmpool[video]') reads the containers")
FFMPEG = shutil.which("ffmpeg")
pytestmark = pytest.mark.skipif(FFMPEG is None, reason="ffmpeg is not installed (apt-get install ffmpeg)")

SOURCE = ["-f", "lavfi", "-i", "testsrc2=size=64x48:rate=30"]  # 30 fps; MP4's time base is then 1/15360
X264 = ["-c:v", "libx264", "-pix_fmt", "yuv420p"]


def _ffmpeg(*args: str | Path) -> None:
    assert FFMPEG is not None
    subprocess.run([FFMPEG, "-v", "error", "-y", *map(str, args)], check=True, capture_output=True)


@pytest.fixture(scope="module")
def clips(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("clips")
    # 60 frames in one group of pictures, then cut at 1 s without re-encoding: the copy must start at
    # the key frame, so FFmpeg keeps frames 0-29 and writes an edit list that starts the video at 1 s
    _ffmpeg(*SOURCE, "-t", "2", *X264, "-preset", "ultrafast", "-g", "60", "-bf", "0", d / "gop.mp4")
    _ffmpeg("-ss", "1", "-i", d / "gop.mp4", "-c", "copy", d / "cut.mp4")
    # 60 frames with up to 3 B-frames: packets come in decode order, not in time order
    _ffmpeg(*SOURCE, "-t", "2", *X264, "-preset", "medium", "-bf", "3", d / "bframes.mp4")
    # 3 frames: fewer than the 4 SGLang's sampling takes at least
    _ffmpeg(*SOURCE, "-frames:v", "3", *X264, "-preset", "ultrafast", d / "three.mp4")
    return {p.stem: p for p in d.iterdir()}


def _packets(path: Path) -> list[tuple[int, int, bool]]:
    """(pts, duration, discard) of each video packet, in the order the demuxer returns them."""
    with av.open(str(path)) as c:
        return [(p.pts, p.duration, p.is_discard) for p in c.demux(c.streams.video[0]) if p.size]


def _probe(path: Path):
    from mmpool_cli.inputs.traffic.videos import probe

    with path.open("rb") as f:
        return probe(f)


def _torchcodec(path: Path) -> tuple[int, float] | None:
    try:
        from torchcodec.decoders import VideoDecoder
    except Exception:  # noqa: BLE001 - torchcodec needs torch and FFmpeg's shared libraries
        return None
    decoder = VideoDecoder(str(path), dimension_order="NHWC")  # SGLang's call, utils/video_decoder.py
    return len(decoder), decoder.metadata.average_fps


def test_packets_an_edit_list_discards_are_not_frames(clips: dict[str, Path]) -> None:
    packets = _packets(clips["cut"])
    assert (len(packets), sum(d for _, _, d in packets)) == (60, 30)  # the branch is reached: 30 to discard
    info = _probe(clips["cut"])
    # 30 frames shown (1 s to 2 s), each 512/15360 s: 30 / (30 x 512 / 15360 s = 1 s) = 30 fps
    assert (info.frames, info.average_fps) == (30, 30.0)
    assert _torchcodec(clips["cut"]) in (None, (30, 30.0))


def test_the_span_runs_to_the_latest_packet_not_the_last_in_decode_order(clips: dict[str, Path]) -> None:
    packets = _packets(clips["bframes"])
    ends = [pts + duration for pts, duration, _ in packets]
    assert ends[-1] < max(ends)  # the branch is reached: the last packet decoded is not the latest shown
    info = _probe(clips["bframes"])
    # 60 frames from pts 0 to the latest end, 60 x 512 = 30720 (2 s): 30 fps (to the last packet's end,
    # 30208, it would be 60 / 1.9667 s = 30.51)
    assert (min(pts for pts, _, _ in packets), max(ends)) == (0, 30720)
    assert (info.frames, info.average_fps) == (60, 30.0)
    assert _torchcodec(clips["bframes"]) in (None, (60, 30.0))


@pytest.mark.parametrize("max_frames", [None, 768])  # SGLang's default bound, and one the server's config gives
def test_a_clip_shorter_than_sglangs_sampling_asks_for(clips: dict[str, Path], tmp_path: Path, max_frames) -> None:
    info = _probe(clips["three"])
    assert (info.frames, info.average_fps) == (3, 30.0)
    assert _torchcodec(clips["three"]) in (None, (3, 30.0))
    fam = family("qwen2.5-vl")
    settings = dict(fam.settings) | ({} if max_frames is None else {"max_frames": max_frames})
    # smart_nframes (qwen_vl.py:199-244): 3 / 30 x 2 = 0.2, raised to min_frames 4, bounded by max_frames
    # (floor to 2 of min(768, 3) = 2, or 768), then by the clip's 3 frames, floored to a multiple of 2: 2
    p = _qwen_params(settings | {"video_total_pixels": video_total_pixels({})}, fam)  # SGLang's 90,316,800
    assert video_frames(info.frames, Fraction(info.average_fps), p) == 2
    # the pooled tensor: 2 frames (one temporal group of 2) of 64x48 raised to VIDEO_MIN_PIXELS,
    # ceil(48 x 5.7155 / 28) x 28 = 280 by ceil(64 x 5.7155 / 28) x 28 = 392 (beta = sqrt(100352 / 3072)):
    # 12 x 2 x 280 x 392 = 2,634,240 B of float32
    body = {"id": "r0", "timestamp": 1_796_000_000, "messages": [{"role": "user", "content": [
        {"type": "video_url", "video_url": {"url": str(clips["three"])}}]}]}  # fmt: skip
    bodies = tmp_path / "bodies.jsonl"
    bodies.write_text(json.dumps(body) + "\n")
    conv = convert(Options(fam, settings, "auto", [str(bodies)], environ={}))
    assert [lease.nbytes for lease in conv.leases] == [2_634_240]
