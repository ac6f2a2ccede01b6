"""Record what SGLang 0.5.23 makes of small FFmpeg-encoded videos, and write request logs holding them.

For each recipe (an FFmpeg command over its ``lavfi`` test source: MP4/H.264, WebM/VP9, MKV, MOV,
variable frame rate, a rotation tag, 23.976 and 29.97 fps, portrait) the video is encoded, opened
with the wheel's own ``VideoDecoderWrapper`` (``utils/video_decoder.py``: torchcodec) and passed
through the wheel's own ``preprocess_video`` (``multimodal/processors/qwen_vl.py``, compiled from
the wheel and run on the CPU, with the default ``VIDEO_MAX_PIXELS`` and a lowered one). Its
frame count, average rate, sampled frames and resized frame size go to ``videos.json``, with the
recipes, so the tests can re-encode the same files and compare mmpool with this record and with
live torchcodec. torchvision's resize, which only fills the pixels, is stood in by
``torch.nn.functional.interpolate`` to the size ``preprocess_video`` chose.

Request logs holding some of the videos are written by the wheel's ``RequestLogger`` exactly as
``scripts/sglang_request_logs.py`` writes the image logs (text and json, levels 2 and 3).

    python scripts/sglang_video_fixtures.py --wheel /tmp/sglang-whl/unpacked \
        --out tests/engines/sglang/traffic/data/sglang-0.5.23/videos

Needs ffmpeg, torch (CPU), torchcodec, numpy, msgspec and Pillow.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import logging
import os
import subprocess
import sys
import tempfile
import types
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import sglang_request_logs as srl  # noqa: E402

LOWERED_VIDEO_MAX_PIXELS = 9_031_680
SRC = "testsrc2=size={size}:rate={rate}:duration={seconds}"
X264 = ["-c:v", "libx264", "-preset", "ultrafast", "-pix_fmt", "yuv420p"]
TINY = [*X264, "-crf", "45"]
VFR = "setpts='if(lt(N,15),N/(15*TB),(15+(N-15)*2)/(15*TB))'"

# name: (file, encoder arguments after the input, source filter, and a post-step for the tag)
RECIPES: dict[str, dict] = {
    "mp4_h264": {"file": "h264.mp4", "src": SRC.format(size="320x240", rate=30, seconds=2), "args": X264},
    "webm_vp9_23976": {
        "file": "vp9.webm",
        "src": SRC.format(size="176x144", rate="24000/1001", seconds=3),
        "args": ["-c:v", "libvpx-vp9", "-deadline", "realtime", "-cpu-used", "8", "-b:v", "100k"],
    },
    "mkv_h264_2997": {"file": "h264.mkv", "src": SRC.format(size="320x180", rate="30000/1001", seconds=10),
                      "args": X264},
    "mp4_2997": {"file": "h264_2997.mp4", "src": SRC.format(size="160x120", rate="30000/1001", seconds=10),
                 "args": X264},
    "mov_h264_25": {"file": "h264.mov", "src": SRC.format(size="256x144", rate=25, seconds=3), "args": X264},
    "mp4_720p": {"file": "h264_720p.mp4", "src": SRC.format(size="1280x720", rate=30, seconds=2), "args": X264},
    "portrait_mp4": {"file": "portrait.mp4", "src": SRC.format(size="180x320", rate=30, seconds=2), "args": X264},
    "vfr_mp4": {"file": "vfr.mp4", "src": SRC.format(size="160x120", rate=15, seconds=4) + "," + VFR,
                "args": ["-fps_mode", "vfr", *X264, "-bf", "0"]},
    "vfr_mkv": {"file": "vfr.mkv", "src": SRC.format(size="160x120", rate=15, seconds=4) + "," + VFR,
                "args": ["-fps_mode", "vfr", *X264]},
    "rotated_mp4": {"file": "rotated.mp4", "from": "h264.mp4", "rotate": 90},
    "rotated_270_mp4": {"file": "rotated270.mp4", "from": "portrait.mp4", "rotate": 270},
    # 120 sampled frames: a lowered VIDEO_MAX_PIXELS caps each frame below 602,112 pixels
    "mp4_720p_long": {"file": "h264_720p_long.mp4", "src": SRC.format(size="1280x720", rate=2, seconds=60),
                      "args": [*X264, "-crf", "45"]},
    # small clips for the request logs, which hold them whole
    "log_mp4": {"file": "log.mp4", "src": SRC.format(size="96x64", rate=30, seconds=2), "args": TINY},
    "log_webm": {"file": "log.webm", "src": SRC.format(size="96x64", rate="24000/1001", seconds=2),
                 "args": ["-c:v", "libvpx-vp9", "-deadline", "realtime", "-cpu-used", "8", "-b:v", "20k"]},
    "log_mov": {"file": "log.mov", "src": SRC.format(size="64x48", rate=25, seconds=3), "args": TINY},
    "log_vfr_mkv": {"file": "log_vfr.mkv", "src": SRC.format(size="64x48", rate=15, seconds=4) + "," + VFR,
                    "args": ["-fps_mode", "vfr", *TINY]},
    "log_portrait": {"file": "log_portrait.mp4", "src": SRC.format(size="48x96", rate=30, seconds=2), "args": TINY},
    "log_2997": {"file": "log_2997.mp4", "src": SRC.format(size="96x64", rate="30000/1001", seconds=5),
                 "args": TINY},
    "log_rotated": {"file": "log_rotated.mp4", "from": "log.mp4", "rotate": 90},
}


def encode(recipe: dict, folder: Path, ffmpeg: str = "ffmpeg") -> Path:
    """Encode one recipe into ``folder`` (the tests call this too); returns the file."""
    out = folder / recipe["file"]
    base = [ffmpeg, "-nostdin", "-v", "error", "-y"]
    if "from" in recipe:
        # a display matrix on a copy: -display_rotation (FFmpeg >= 6), else the mov muxer's rotate tag
        src = folder / recipe["from"]
        turn = recipe["rotate"]
        first = [*base, "-display_rotation", str(-turn if turn != 270 else 90), "-i", str(src), "-c", "copy", str(out)]
        if subprocess.run(first, capture_output=True).returncode != 0:
            tag = ["-metadata:s:v:0", f"rotate={turn}"]
            subprocess.run([*base, "-i", str(src), "-c", "copy", *tag, str(out)], check=True, capture_output=True)
        return out
    subprocess.run([*base, "-f", "lavfi", "-i", recipe["src"], *recipe["args"], str(out)], check=True,
                   capture_output=True)
    return out


def encode_all(folder: Path, ffmpeg: str = "ffmpeg") -> dict[str, Path]:
    return {name: encode(r, folder, ffmpeg) for name, r in RECIPES.items()}


def load_sglang_video(root: Path, video_max_pixels: int | None):
    """The wheel's VideoDecoderWrapper and preprocess_video, on the CPU."""
    common = types.ModuleType("sglang.srt.utils.common")
    common.is_cpu = lambda: True
    sys.modules["sglang.srt.utils.common"] = common
    ns: dict = {"__name__": "sglang.srt.utils.video_decoder"}
    path = root / "sglang/srt/utils/video_decoder.py"
    exec(compile(path.read_text(), str(path), "exec"), ns)
    if ns["_BACKEND"] != "torchcodec":
        raise SystemExit("torchcodec cannot be imported: SGLang would use decord")

    import math
    import time

    import numpy as np
    import torch

    class _F:
        @staticmethod
        def resize(video, size, interpolation=None):
            return torch.nn.functional.interpolate(video.float(), size=size, mode="bilinear").to(torch.uint8)

    tv = types.SimpleNamespace(transforms=types.SimpleNamespace(functional=_F))
    env = dict(os.environ)
    if video_max_pixels is not None:
        env["VIDEO_MAX_PIXELS"] = str(video_max_pixels)
    qns: dict = {
        "math": math, "time": time, "np": np, "torch": torch, "torchvision": tv,
        "InterpolationMode": types.SimpleNamespace(BILINEAR="bilinear"),
        "VideoDecoderWrapper": ns["VideoDecoderWrapper"], "is_cpu": lambda: True,
        "logger": logging.getLogger("sglang-video"),
        "os": types.SimpleNamespace(environ=env),
        # smart_resize's default bound, envs.SGLANG_IMAGE_MAX_PIXELS (environ.py:1599); unused by preprocess_video
        "MAX_PIXELS": 16384 * 28 * 28,
    }
    srl._compile(
        root / "sglang/srt/multimodal/processors/qwen_vl.py",
        ["IMAGE_FACTOR", "MIN_PIXELS", "MAX_RATIO", "VIDEO_TOTAL_PIXELS", "VIDEO_MIN_PIXELS", "VIDEO_MAX_PIXELS",
         "FRAME_FACTOR", "FPS", "FPS_MIN_FRAMES", "FPS_MAX_FRAMES", "smart_resize", "round_by_factor", "ceil_by_factor",
         "floor_by_factor", "smart_nframes", "preprocess_video"],
        qns,
    )
    return ns["VideoDecoderWrapper"], qns["preprocess_video"], qns["VIDEO_TOTAL_PIXELS"]


def measure(wrapper, preprocess, source) -> dict:
    """torchcodec's figures and preprocess_video's choices for one video (a path or its bytes)."""
    try:
        vr = wrapper(source)
    except Exception as e:  # noqa: BLE001 - recorded: SGLang fails such a request
        return {"error": type(e).__name__}
    out = {"frames": len(vr), "average_fps": vr.avg_fps, "rotation": vr._decoder.metadata.rotation}
    try:
        video, meta = asyncio.run(preprocess(vr, video_config={}))
    except Exception as e:  # noqa: BLE001
        return out | {"error": type(e).__name__}
    first = vr.get_frames_at([0])
    out |= {"height": int(first.shape[1]), "width": int(first.shape[2]), "sampled": int(video.shape[0]),
            "resized_height": int(video.shape[2]), "resized_width": int(video.shape[3])}
    return out


def video_requests(sg, clips: dict[str, bytes]) -> list[dict]:
    url = {k: "data:video/mp4;base64," + base64.b64encode(v).decode() for k, v in clips.items()}
    b64 = {k: base64.b64encode(v).decode() for k, v in clips.items()}
    return [
        {"rid": "warmup0", "chat": True, "images": ["data:image/png;base64," + sg.warmup_png], "warmup": True},
        {"rid": "chat-mp4", "chat": True, "videos": [url["log_mp4"]], "fields": {"fps": 1.0, "max_frames": 8}},
        {"rid": "gen-webm", "chat": False, "videos": [url["log_webm"]]},
        {"rid": "gen-two", "chat": False, "videos": [url["log_mov"], url["log_vfr_mkv"]]},
        {"rid": "raw-b64", "chat": False, "single": b64["log_portrait"]},
        {"rid": ["batch-a", "batch-b"], "chat": False, "batch": [[url["log_2997"]], [url["log_rotated"]]]},
    ]


def _generate_input(sg, req: dict):
    common = {"sampling_params": {"max_new_tokens": 8}}
    if "batch" in req:
        obj = sg.GenerateReqInput(text=["Describe.", "Describe."], video_data=req["batch"], rid=req["rid"], **common)
    elif "single" in req:
        obj = sg.GenerateReqInput(text="<video> Describe.", video_data=req["single"], rid=req["rid"], **common)
    elif req.get("images"):
        data = [sg.ImageData(url=u, detail="auto") for u in req["images"]]
        obj = sg.GenerateReqInput(text="<|im_start|>user\nDescribe the image.<|im_end|>", image_data=data,
                                  rid=req["rid"], sampling_params={"temperature": 0.0, "max_new_tokens": 8})
    elif req["chat"]:
        # serving_chat: a video_url with per-item fields becomes a VideoData (parser/jinja_template_utils.py:272-293)
        fields = req.get("fields")
        video_data = sys.modules["sglang.srt.utils"].VideoData
        data = [video_data(url=u, preprocess_kwargs=fields) if fields else u for u in req["videos"]]
        obj = sg.GenerateReqInput(text="<|im_start|>user\nWhat happens?<|im_end|>", video_data=data,
                                  rid=req["rid"], **common)
    else:
        obj = sg.GenerateReqInput(text="<video> Describe.", video_data=req["videos"], rid=req["rid"], **common)
    obj.normalize_batch_and_arguments()
    return obj


def _openai_body(req: dict) -> dict:
    if req.get("images"):
        content = [{"type": "image_url", "image_url": {"url": u}} for u in req["images"]]
        text = "Describe the image."
    else:
        content = [{"type": "video_url", "video_url": {"url": u, **req.get("fields", {})}} for u in req["videos"]]
        text = "What happens?"
    body = {"model": "default", "messages": [{"role": "user", "content": [*content, {"type": "text", "text": text}]}]}
    if req.get("warmup"):
        body |= {"max_tokens": 8, "stream": False, "temperature": 0.0}
    return body


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--wheel", required=True, type=Path, help="the unpacked SGLang 0.5.23 wheel")
    p.add_argument("--out", required=True, type=Path)
    args = p.parse_args()
    os.environ["TZ"] = "UTC"
    import time

    time.tzset()
    sys.path.insert(0, str(args.wheel))
    sg = srl.load_sglang(args.wheel)
    args.out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        files = encode_all(Path(tmp))
        clips = {name: path.read_bytes() for name, path in files.items() if name.startswith("log_")}
        record: dict = {"sglang": "0.5.23", "recipes": RECIPES, "videos": {}, "lowered_video_max_pixels":
                        LOWERED_VIDEO_MAX_PIXELS}
        for variant, pixels in (("default", None), ("lowered", LOWERED_VIDEO_MAX_PIXELS)):
            wrapper, preprocess, total = load_sglang_video(args.wheel, pixels)
            record[f"video_total_pixels_{variant}"] = total
            for name, path in files.items():
                record["videos"].setdefault(name, {})[variant] = measure(wrapper, preprocess, str(path))
        reqs = video_requests(sg, clips)
        srl._generate_input, srl._openai_body = _generate_input, _openai_body
        for fmt in ("text", "json"):
            for level in (2, 3):
                srl.write_log(sg, reqs, fmt, level, args.out / f"server-{fmt}-level{level}.log")
        expected = {}
        wrapper, preprocess, _ = load_sglang_video(args.wheel, None)
        for req in reqs[1:]:
            groups = dict(zip(req["rid"], req["batch"], strict=True)) if "batch" in req else {
                req["rid"]: [req["single"]] if "single" in req else req["videos"]}
            for rid, refs in groups.items():
                items = []
                for ref in refs:
                    data = base64.b64decode(ref.split(",", 1)[1] if ref.startswith("data:") else ref)
                    items.append(measure(wrapper, preprocess, data))
                expected[rid] = items
        record["logged"] = expected
    (args.out / "videos.json").write_text(json.dumps(record, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
