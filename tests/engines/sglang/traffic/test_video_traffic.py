"""Videos in traffic, against SGLang 0.5.23's own decoder and ``preprocess_video``.

``data/sglang-0.5.23/videos/videos.json`` was written by ``scripts/sglang_video_fixtures.py``: the
recipes of small FFmpeg-encoded videos, and what the wheel's ``VideoDecoderWrapper`` (torchcodec)
and ``preprocess_video`` made of each (frames, average rate, sampled frames, resized size), with
SGLang's default ``VIDEO_MAX_PIXELS`` and a lowered one. The tests re-encode the same recipes
with the FFmpeg found here and compare mmpool with that record and with torchcodec itself; the
request logs beside it were written by the wheel's RequestLogger around some of those videos.
The pooled bytes are worked out from the record with the feature-sizes rule for Qwen2/2.5-VL,
``12 · 2⌈T/2⌉ · H · W`` (float32, temporal patch 2), not with mmpool's code.
"""

from __future__ import annotations

import base64
import importlib.util
import json
import math
import shutil
import subprocess
from fractions import Fraction
from pathlib import Path

import pytest

from mmpool_cli.engines.sglang.traffic.convert import Options, convert
from mmpool_cli.inputs.traffic.model import TrafficError
from mmpool_cli.workload.families import family
from mmpool_cli.workload.features import _qwen_params
from mmpool_cli.workload.items import parse_video
from mmpool_cli.workload.qwen import sglang_video_resize, video_frames

av = pytest.importorskip("av", reason="PyAV (pip install '.[video]') reads the containers")

ROOT = Path(__file__).resolve().parents[4]
DATA = Path(__file__).parent / "data" / "sglang-0.5.23" / "videos"
RECORD = json.loads((DATA / "videos.json").read_text())
NAMES = sorted(RECORD["recipes"])
FFMPEG = shutil.which("ffmpeg")
needs_ffmpeg = pytest.mark.skipif(FFMPEG is None, reason="ffmpeg is not installed (apt-get install ffmpeg)")


def _script():
    spec = importlib.util.spec_from_file_location("sglang_video_fixtures", ROOT / "scripts/sglang_video_fixtures.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def encoded(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    if FFMPEG is None:
        pytest.skip("ffmpeg is not installed (apt-get install ffmpeg)")
    script = _script()
    assert RECORD["recipes"] == script.RECIPES, "the record is older than the recipes: re-run the script"
    return script.encode_all(tmp_path_factory.mktemp("videos"), FFMPEG)


def _probe(path: Path):
    from mmpool_cli.inputs.traffic.videos import probe

    with path.open("rb") as f:
        return probe(f)


def _torchcodec():
    try:
        from torchcodec.decoders import VideoDecoder
    except Exception as e:  # noqa: BLE001 - torchcodec needs torch and FFmpeg's shared libraries
        pytest.skip(f"torchcodec cannot be imported here ({type(e).__name__}): pip install torchcodec")
    return VideoDecoder


def _bytes_qwen25(sampled: int, height: int, width: int) -> int:
    return 12 * 2 * math.ceil(sampled / 2) * height * width


def _bytes_qwen3(sampled: int, height: int, width: int, min_pixels: int, max_pixels: int) -> int:
    """Qwen3VLVideoProcessor's smart_resize of the T·H·W volume (factor 32), in plain floats as HF runs it."""
    f = 32
    h, w = round(height / f) * f, round(width / f) * f
    t = round(sampled / 2) * 2
    if t * h * w > max_pixels:
        beta = math.sqrt(sampled * height * width / max_pixels)
        h, w = max(f, math.floor(height / beta / f) * f), max(f, math.floor(width / beta / f) * f)
    elif t * h * w < min_pixels:
        beta = math.sqrt(min_pixels / (sampled * height * width))
        h, w = math.ceil(height * beta / f) * f, math.ceil(width * beta / f) * f
    return 12 * 2 * math.ceil(sampled / 2) * h * w


@needs_ffmpeg
@pytest.mark.parametrize("name", NAMES)
def test_frames_rate_and_size_are_sglangs_decoders(name: str, encoded: dict[str, Path]) -> None:
    got = _probe(encoded[name])
    want = RECORD["videos"][name]["default"]
    assert (got.frames, got.average_fps, got.width, got.height) == (
        want["frames"],
        want["average_fps"],
        want["width"],
        want["height"],
    )
    assert got.rotation == round(want["rotation"] or 0)
    assert not got.rate_depends_on_demuxer


@needs_ffmpeg
@pytest.mark.parametrize("name", NAMES)
def test_frames_rate_and_size_are_torchcodecs_here(name: str, encoded: dict[str, Path]) -> None:
    decoder = _torchcodec()(str(encoded[name]), dimension_order="NHWC")  # SGLang's call, video_decoder.py
    frame = decoder.get_frames_at([0]).data
    got = _probe(encoded[name])
    assert (got.frames, got.average_fps) == (len(decoder), decoder.metadata.average_fps)
    assert (got.height, got.width) == (int(frame.shape[1]), int(frame.shape[2]))


@pytest.mark.parametrize("variant", ["default", "lowered"])
@pytest.mark.parametrize("name", NAMES)
def test_sampling_and_resize_are_preprocess_videos(name: str, variant: str) -> None:
    want = RECORD["videos"][name][variant]
    fam = family("qwen2.5-vl")
    settings = dict(fam.settings) | {"video_total_pixels": RECORD[f"video_total_pixels_{variant}"]}
    p = _qwen_params(settings, fam)
    frames = video_frames(want["frames"], Fraction(want["average_fps"]), p)
    assert frames == want["sampled"]
    assert sglang_video_resize(want["height"], want["width"], frames, p) == (
        want["resized_height"],
        want["resized_width"],
    )


CONSTANT_RATE = [n for n in NAMES if "src" in RECORD["recipes"][n] and "setpts" not in RECORD["recipes"][n]["src"]]


@pytest.mark.parametrize("name", CONSTANT_RATE)
def test_a_video_given_by_its_length_or_frames_is_what_sglangs_decoder_counted_and_sampled(name: str) -> None:
    """``--video WxH:SECONDS:FPS`` of an encoding's own size, duration and rate (23.976 and 29.97 fps as
    FFmpeg's ratios and as decimals), and ``WxH:FRAMES@FPS``: the frames SGLang 0.5.23's decoder counted
    in the file FFmpeg wrote (``-t 10`` at 30000/1001: 300, not 299) and the frames it sampled."""
    src = dict(part.split("=") for part in RECORD["recipes"][name]["src"].removeprefix("testsrc2=").split(":"))
    want = RECORD["videos"][name]["default"]
    fam = family("qwen2.5-vl")
    p = _qwen_params(dict(fam.settings) | {"video_total_pixels": RECORD["video_total_pixels_default"]}, fam)
    rates = [src["rate"]] + ([f"{float(Fraction(src['rate'])):.3f}".rstrip("0")] if "/" in src["rate"] else [])
    for rate in rates:  # "30000/1001" and "29.97"
        for text in (f"{src['size']}:{src['duration']}:{rate}", f"{src['size']}:{want['frames']}@{rate}"):
            video = parse_video(text)
            assert video.frames == want["frames"], text
            assert video_frames(video.frames, video.fps, p) == want["sampled"], text


def _bodies(tmp_path: Path, refs: list[str], **fields: object) -> Path:
    lines = []
    for n, ref in enumerate(refs):
        part = {"type": "video_url", "video_url": {"url": ref, **fields}}
        body = {"id": f"r{n}", "timestamp": 1_796_000_000 + n, "messages": [{"role": "user", "content": [part]}]}
        lines.append(json.dumps(body))
    path = tmp_path / "bodies.jsonl"
    path.write_text("\n".join(lines) + "\n")
    return path


def _run(path: Path, model: str = "qwen2.5-vl", environ: dict[str, str] | None = None, **kw):
    fam = family(model)
    return convert(Options(fam, dict(fam.settings), "auto", [str(path)], environ=environ or {}, **kw))


@needs_ffmpeg
@pytest.mark.parametrize("model", ["qwen2.5-vl", "qwen3-vl"])
@pytest.mark.parametrize("variant", ["default", "lowered"])
def test_trace_pools_each_video_as_sglang_would(
    variant: str, model: str, encoded: dict[str, Path], tmp_path: Path
) -> None:
    refs = []
    for n, name in enumerate(NAMES):  # every form a video_url takes: file://, a path, data:, raw base64
        path = encoded[name]
        data = base64.b64encode(path.read_bytes()).decode()
        refs.append([f"file://{path}", str(path), f"data:video/mp4;base64,{data}", data][n % 4])
    environ = {} if variant == "default" else {"VIDEO_MAX_PIXELS": str(RECORD["lowered_video_max_pixels"])}
    conv = _run(_bodies(tmp_path, refs, fps=1, max_frames=8), model=model, environ=environ, hold_ns=10**9)
    got = {lease.id: lease.nbytes for lease in conv.leases}
    bounds = family("qwen3-vl").settings
    for n, name in enumerate(NAMES):
        want = RECORD["videos"][name][variant]
        frame = (want["sampled"], want["resized_height"], want["resized_width"])
        if model == "qwen3-vl":  # SGLang's pre-resize is the same (factor 28), then the volume's
            expected = _bytes_qwen3(*frame, bounds["video_min_pixels"], bounds["video_max_pixels"])
        else:
            expected = _bytes_qwen25(*frame)
        assert got[f"r{n}/0"] == expected, name
    # SGLang's Qwen processors read no per-item video field (qwen_vl.py:248-290)
    assert conv.summary.ignored_fields == {"fps": len(NAMES), "max_frames": len(NAMES)}
    assert any("measured from the container" in note and "; with FFmpeg " in note for note in conv.summary.notes)


@pytest.mark.parametrize("log", ["server-json-level3.log", "server-text-level3.log"])
def test_request_logs_that_keep_videos_whole(log: str) -> None:
    conv = _run(DATA / log)
    got: dict[str, list[int]] = {}
    for lease in conv.leases:
        got.setdefault(lease.id.rsplit("/", 1)[0], []).append(lease.nbytes)
    want = {
        rid: [_bytes_qwen25(i["sampled"], i["resized_height"], i["resized_width"]) for i in items]
        for rid, items in RECORD["logged"].items()
    }
    assert got == want
    assert conv.summary.warmup == 1
    assert conv.summary.ignored_fields == {"preprocess_kwargs": 1}  # chat-mp4's VideoData


def test_a_log_that_cuts_video_strings_says_to_keep_them_whole() -> None:
    with pytest.raises(TrafficError) as e:
        _run(DATA / "server-json-level2.log")
    assert "--log-requests-level 3" in str(e.value)
    assert "(7 items or lines could not be used)" in str(e.value)


def test_text_level2_cuts_a_single_string_and_keeps_lists_whole() -> None:
    with pytest.raises(TrafficError) as e:
        _run(DATA / "server-text-level2.log")
    lines = str(e.value).splitlines()
    assert len(lines) == 1 and "(request raw-b64, item 0)" in lines[0] and "--log-requests-level 3" in lines[0]


def test_http_videos_are_counted_and_refused_unless_assumed(tmp_path: Path) -> None:
    path = _bodies(tmp_path, ["https://example.com/a.mp4", "http://example.com/b.mp4"])
    with pytest.raises(TrafficError) as e:
        _run(path)
    assert "give --assume-video WxH:SECONDS:FPS" in str(e.value) and "(2 items or lines" in str(e.value)
    conv = _run(path, assume_video=parse_video("1920x1080:30:30"))
    # the figure: 30 s of 1080p at 30 fps on Qwen2.5-VL, as plan --video sizes it
    assert [lease.nbytes for lease in conv.leases] == [406_425_600, 406_425_600]
    assert [lease.item for lease in conv.leases] == ["video 1920x1080 30s@30fps"] * 2


@needs_ffmpeg
def test_a_variable_rate_mp4_with_b_frames_is_sized_with_a_warning(tmp_path: Path) -> None:
    path = tmp_path / "vfr_bframes.mp4"
    src = "testsrc2=size=160x120:rate=30:duration=3,setpts='if(lt(N,30),N/(30*TB),(30+(N-30)*2)/(30*TB))'"
    cmd = [FFMPEG, "-nostdin", "-v", "error", "-y", "-f", "lavfi", "-i", src, "-fps_mode", "vfr", "-c:v", "libx264"]
    subprocess.run([*cmd, "-preset", "ultrafast", "-bf", "2", "-pix_fmt", "yuv420p", str(path)], check=True)
    conv = _run(_bodies(tmp_path, [str(path)]))
    codes = [f.code for f in conv.summary.findings]
    assert codes == ["traffic-video-rate-varies"] and len(conv.leases) == 1


def test_a_fifo_named_as_a_video_is_refused_without_waiting(tmp_path: Path) -> None:
    fifo = tmp_path / "clip.mp4"
    import os

    os.mkfifo(fifo)
    with pytest.raises(TrafficError) as e:
        _run(_bodies(tmp_path, [str(fifo), f"file://{fifo}"]))
    assert str(e.value).count("FIFO") == 2


def test_a_family_without_video_refuses_it(tmp_path: Path) -> None:
    with pytest.raises(TrafficError) as e:
        _run(_bodies(tmp_path, ["https://example.com/a.mp4"]), model="gemma3")
    assert "gemma3 takes no video" in str(e.value)


def test_a_receive_event_with_video_data_alone_is_a_request(tmp_path: Path) -> None:
    log = (DATA / "server-json-level3.log").read_text().splitlines()
    # the same requests with their image_data key left out: video_data alone says level 2 or 3
    events = [json.loads(line[line.index("{") :]) for line in log if '"event": "request.received"' in line]
    lines = []
    for event in events:
        event["obj"].pop("image_data", None)
        lines.append("[2026-12-01 10:00:00] " + json.dumps(event))
    path = tmp_path / "server.log"
    path.write_text("\n".join(lines) + "\n")
    conv = _run(path)
    assert {lease.id.rsplit("/", 1)[0] for lease in conv.leases} == set(RECORD["logged"])


def test_a_video_sglangs_decoder_fails_on_is_a_failing_request_and_the_error_says_so(tmp_path: Path) -> None:
    cut = tmp_path / "cut.mp4"
    cut.write_bytes((ROOT / "examples/traffic/clip.mp4").read_bytes()[:4000])  # FFmpeg writes moov at the end
    with pytest.raises(TrafficError) as e:
        _run(_bodies(tmp_path, [str(cut)]))
    assert "no request with an image or a video the pool would take; nothing to size\n  " in str(e.value)
    assert "not a video FFmpeg can open (Invalid data found when processing input)" in str(e.value)


def test_the_shipped_clip_is_what_the_readme_shows() -> None:
    conv = _run(ROOT / "examples/traffic/videos.jsonl", assume_video=parse_video("1280x720:60:30"))
    # 120 frames at 30000/1001 fps: 8 sampled, 320x180 enlarged to 448x252; 60 s of 720p: 120 frames of 1008x560
    assert [(le.item, le.nbytes) for le in conv.leases] == [
        ("video 320x180 120 frames at 29.97 fps", _bytes_qwen25(8, 252, 448)),
        ("video 1280x720 60s@30fps", _bytes_qwen25(120, 560, 1008)),
    ]
