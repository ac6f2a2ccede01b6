"""Write a large SGLang 0.5.23 server log for timing ``mmpool trace`` (see benchmarks/README.md).

The log is what ``--log-requests --log-requests-level 2 --log-requests-format json`` and
``--enable-request-time-stats-logging`` write around the server's own lines: per request a
``request.received.openai``, a ``request.received`` and a ``request.finished`` event with every
image string cut to its first 1024 characters, ``...`` and its last 1024
(``utils/request_logger.py:329-334``), a ``ReqTimeStats`` line, and the scheduler's batch lines
as padding until the file reaches ``--size``. Images are real JPEGs and PNGs of a few sizes.

    python benchmarks/traffic_log.py --requests 100000 --size 1GB --out /tmp/server-1g.log
    /usr/bin/time -v mmpool trace --model qwen2.5-vl /tmp/server-1g.log -o /tmp/trace-1g.jsonl

``--videos`` writes instead one whole video per request (``--log-requests-level 3``, the level
that keeps a video's bytes; text: level 2, which prints a list whole): MP4 and MOV clips that
FFmpeg encodes here, from 480x270 to 1280x720 and 4 to 20 s, each request's made distinct by a
trailing ``free`` box of random bytes, so that no clip is read twice.
"""

from __future__ import annotations

import argparse
import base64
import io
import json
import random
import subprocess
import tempfile
import time

from PIL import Image

SIZES = [(1920, 1080), (1280, 720), (640, 480), (1024, 1024), (3840, 2160), (800, 1200)]
# the text format prints a list's strings whole: small images keep 100,000 requests near 1 GB
TEXT_SIZES = [(64, 64), (96, 64), (128, 96), (80, 120), (112, 112), (72, 48)]


def _images(rng: random.Random, sizes: list[tuple[int, int]], cut: bool) -> list[str]:
    urls = []
    for width, height in sizes:
        for fmt, kind in (("JPEG", "jpeg"), ("PNG", "png")):
            image = Image.new("RGB", (width, height), (rng.randrange(256), 90, 140))
            side = min(48, width, height) // 2
            patch = Image.frombytes("RGB", (side, side), rng.randbytes(side * side * 3))
            image.paste(patch, (0, 0))
            buf = io.BytesIO()
            image.save(buf, fmt, quality=85) if fmt == "JPEG" else image.save(buf, fmt)
            url = f"data:image/{kind};base64,{base64.b64encode(buf.getvalue()).decode()}"
            urls.append(url[:1024] + "..." + url[-1024:] if cut and len(url) > 2048 else url)
    return urls


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--requests", type=int, default=100_000)
    p.add_argument("--size", default="1GB", help="target file size: 1GB is 10**9 bytes")
    p.add_argument("--out", required=True)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--format", choices=["json", "text"], default="json", help="--log-requests-format")
    p.add_argument("--videos", action="store_true", help="one whole video per request (level 3)")
    args = p.parse_args()
    if args.videos:
        return videos(args)
    text = args.format == "text"
    target = int(args.size.removesuffix("GB")) * 10**9 if args.size.endswith("GB") else int(args.size)
    rng = random.Random(args.seed)
    urls = _images(rng, TEXT_SIZES if text else SIZES, cut=not text)
    start = 1_796_000_000.0
    pad = (
        "Decode batch, #running-req: 12, #token: 48211, token usage: 0.31, cuda graph: True, "
        "gen throughput (token/s): 812.44"
    )
    written = 0
    per_request = target / args.requests
    with open(args.out, "w", encoding="utf-8") as out:

        def line(t: float, text: str, tp: bool = False) -> None:
            nonlocal written
            stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(t))
            s = f"[{stamp}{' TP0' if tp else ''}] {text}\n"
            out.write(s)
            written += len(s)

        line(start, "server_args=ServerArgs(model_path='Qwen/Qwen2.5-VL-7B-Instruct', log_requests=True, ...)")
        t = start
        for n in range(args.requests):
            t += rng.expovariate(20.0)
            iso = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(t)) + f".{int(t % 1 * 1e6):06d}"
            images = [rng.choice(urls) for _ in range(rng.randint(1, 2))]
            rid = f"{rng.getrandbits(128):032x}"
            content = [{"type": "image_url", "image_url": {"url": u}} for u in images]
            body = {
                "model": "default",
                "messages": [{"role": "user", "content": [*content, {"type": "text", "text": "Describe."}]}],
            }
            if text:
                datas = ", ".join(
                    f"ImageData(url={u!r}, detail='auto', max_dynamic_patch=None, preprocess_kwargs=None, "
                    "content_hash=None, max_long_side_pixel=None)"
                    for u in images
                )
                obj_text = (
                    f"GenerateReqInput(rid={rid!r}, session_id=None, text='<|im_start|>user\\nDescribe.<|im_end|>', "
                    f"input_ids=None, input_embeds=None, image_data=[{datas}], video_data=None, audio_data=None, "
                    "sampling_params={'max_new_tokens': 64}, return_logprob=False, stream=False)"
                )
                end = t + rng.uniform(0.2, 2.0)
                line(t, f"Receive OpenAI: obj={body!r}")
                line(t, f"Receive: obj={obj_text}")
                line(end, f"Finish: obj={obj_text}, out={{'text': 'A picture.', 'meta_info': {{'id': {rid!r}}}}}")
                while written < per_request * (n + 1):
                    line(end, pad, tp=True)
                continue
            line(t, json.dumps({"timestamp": iso, "event": "request.received.openai", "obj": body}))
            obj = {
                "rid": rid,
                "text": "<|im_start|>user\nDescribe.<|im_end|>",
                "image_data": [{"url": u, "detail": "auto", "max_dynamic_patch": None} for u in images],
                "sampling_params": {"max_new_tokens": 64},
            }
            line(t, json.dumps({"timestamp": iso, "event": "request.received", "rid": rid, "obj": obj}))
            end = t + rng.uniform(0.2, 2.0)
            line(
                end,
                f"ReqTimeStats(rid={rid}, input_len=1200, cached_input_len=0, output_len=64, attempts=1, "
                f"type=unified): queue_duration={rng.uniform(1, 80):.2f}ms, forward_duration=900.00ms, "
                f"entry_time={t:.3f}",
                tp=True,
            )
            out_obj = {"text": "A picture.", "meta_info": {"id": rid, "e2e_latency": end - t}}
            line(
                end, json.dumps({"timestamp": iso, "event": "request.finished", "rid": rid, "obj": obj, "out": out_obj})
            )
            while written < per_request * (n + 1):
                line(end, pad, tp=True)
    print(f"{args.out}: {written:,} bytes, {args.requests:,} requests")
    return 0


# (W, H, fps, seconds, container): FFmpeg's test pattern at the lowest x264 quality, 0.1-1 MB a clip
CLIPS = [(1280, 720, 30, 10, "mp4"), (854, 480, 25, 20, "mp4"), (640, 360, 30, 8, "mov"), (480, 270, 24, 4, "mp4"),
         (720, 1280, 30, 6, "mp4"), (960, 540, 30000 / 1001, 12, "mov")]  # fmt: skip


def _clips() -> list[bytes]:
    out = []
    with tempfile.TemporaryDirectory() as tmp:
        for n, (w, h, fps, seconds, ext) in enumerate(CLIPS):
            path = f"{tmp}/clip{n}.{ext}"
            rate = "30000/1001" if isinstance(fps, float) else str(fps)
            subprocess.run(
                ["ffmpeg", "-nostdin", "-v", "error", "-y", "-f", "lavfi", "-i",
                 f"testsrc2=size={w}x{h}:rate={rate}:duration={seconds}", "-c:v", "libx264", "-preset", "ultrafast",
                 "-crf", "51", "-pix_fmt", "yuv420p", path],
                check=True,
            )  # fmt: skip
            with open(path, "rb") as f:
                out.append(f.read())
    return out


def videos(args: argparse.Namespace) -> int:
    """The video log: per request a Receive OpenAI and a Receive line (or events), a ReqTimeStats, a Finish."""
    text = args.format == "text"
    target = int(args.size.removesuffix("GB")) * 10**9 if args.size.endswith("GB") else int(args.size)
    rng = random.Random(args.seed)
    clips = _clips()
    written = requests = 0
    t = 1_796_000_000.0
    with open(args.out, "w", encoding="utf-8") as out:

        def line(t: float, body: str, tp: bool = False) -> None:
            nonlocal written
            stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(t))
            s = f"[{stamp}{' TP0' if tp else ''}] {body}\n"
            out.write(s)
            written += len(s)

        line(t, "server_args=ServerArgs(model_path='Qwen/Qwen2.5-VL-7B-Instruct', log_requests=True, ...)")
        while written < target and requests < args.requests:
            requests += 1
            t += rng.expovariate(5.0)
            iso = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(t)) + f".{int(t % 1 * 1e6):06d}"
            clip = rng.choice(clips) + b"\x00\x00\x00\x18free" + rng.randbytes(16)  # a distinct, valid file
            url = "data:video/mp4;base64," + base64.b64encode(clip).decode()
            rid = f"{rng.getrandbits(128):032x}"
            part = {"type": "video_url", "video_url": {"url": url}}
            content = [part, {"type": "text", "text": "?"}]
            body = {"model": "default", "messages": [{"role": "user", "content": content}]}
            end = t + rng.uniform(0.5, 4.0)
            if text:
                obj = (
                    f"GenerateReqInput(rid={rid!r}, session_id=None, text='<|im_start|>user\\n?<|im_end|>', "
                    f"input_ids=None, input_embeds=None, image_data=None, video_data=[{url!r}], audio_data=None, "
                    "sampling_params={'max_new_tokens': 64}, return_logprob=False, stream=False)"
                )
                line(t, f"Receive OpenAI: obj={body!r}")
                line(t, f"Receive: obj={obj}")
                line(end, f"Finish: obj=GenerateReqInput(rid={rid!r}, ...), out={{'text': 'A clip.'}}")
                continue
            obj_json = {"rid": rid, "text": "<|im_start|>user\n?<|im_end|>", "image_data": None, "video_data": [url],
                        "sampling_params": {"max_new_tokens": 64}}  # fmt: skip
            line(t, json.dumps({"timestamp": iso, "event": "request.received.openai", "obj": body}))
            line(t, json.dumps({"timestamp": iso, "event": "request.received", "rid": rid, "obj": obj_json}))
            line(
                end,
                f"ReqTimeStats(rid={rid}, input_len=4000, cached_input_len=0, output_len=64, attempts=1, "
                f"type=unified): queue_duration={rng.uniform(1, 80):.2f}ms, forward_duration=900.00ms, "
                f"entry_time={t:.3f}",
                tp=True,
            )
            done = {"timestamp": iso, "event": "request.finished", "rid": rid, "obj": {"rid": rid}}
            line(end, json.dumps(done | {"out": {"text": "A clip.", "meta_info": {"id": rid}}}))
    print(f"{args.out}: {written:,} bytes, {requests:,} requests")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
