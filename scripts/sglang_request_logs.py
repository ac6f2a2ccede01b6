"""Write genuine SGLang 0.5.23 request logs (text and json, levels 2 and 3) for mmpool's tests.

The log lines come from the wheel's own code, run unmodified on the CPU: ``RequestLogger``
(``utils/request_logger.py``) with its ``log_utils`` formatter, logging ``GenerateReqInput`` and
``ImageData`` objects (their class definitions compiled from the wheel's ``managers/io_struct.py``
and ``utils/common.py``) after SGLang's own ``normalize_batch_and_arguments``. Each image's size
as SGLang decodes it comes from the wheel's ``load_image`` (``utils/common.py``) with a CUDA
server's settings; nvJPEG, which needs a GPU, is stood in by a decoder that, like nvJPEG, ignores
EXIF. The scheduler's ``ReqTimeStats`` lines follow their format
(``managers/schedule_batch.py:2199-2219``, ``observability/req_time_stats.py:1099-1111``).

    pip download --no-deps sglang==0.5.23 -d /tmp/sglang-whl
    cd /tmp/sglang-whl && unzip -q -o sglang-0.5.23-*.whl 'sglang/*' -d unpacked
    python scripts/sglang_request_logs.py --wheel /tmp/sglang-whl/unpacked \
        --out tests/engines/sglang/traffic/data/sglang-0.5.23 --example examples/server.log

``--example`` writes the small log the documentation replays (``examples/server.log``): SGLang's
warm-up and eight chat requests of 1080p, 720p and 480p images, ``--log-requests-level 2``, json.

Needs torch (CPU), msgspec and Pillow; SGLang's other dependencies are never imported.
"""

from __future__ import annotations

import argparse
import ast
import base64
import io
import json
import logging
import os
import sys
import time
import types
from datetime import UTC, datetime
from pathlib import Path

from PIL import Image

START = 1_796_000_000  # a fixed wall clock, so the fixtures do not change between runs


def _package(name: str, root: Path) -> None:
    """An importable package whose ``__init__`` is not run (SGLang's import the whole server)."""
    module = types.ModuleType(name)
    module.__path__ = [str(root / name.replace(".", "/"))]
    sys.modules[name] = module


def _compile(path: Path, names: list[str], namespace: dict) -> None:
    """Compile the named top-level definitions of one of the wheel's files into ``namespace``."""
    tree = ast.parse(path.read_text())
    found = []
    for node in tree.body:
        name = getattr(node, "name", None)
        if name is None and isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name):
            name = node.targets[0].id
        if name in names:
            found.append(node)
    missing = set(names) - {getattr(n, "name", None) or n.targets[0].id for n in found}
    if missing:
        raise SystemExit(f"{path} no longer defines {sorted(missing)}")
    exec(compile(ast.Module(body=found, type_ignores=[]), str(path), "exec"), namespace)


def load_sglang(root: Path):
    for name in ("sglang", "sglang.srt", "sglang.srt.utils", "sglang.srt.managers", "sglang.srt.sampling"):
        _package(name, root)
    import typing
    from dataclasses import dataclass, field

    import torch

    # the typing names SGLang's annotations use (its modules are not postponed-annotation ones)
    names = {n: getattr(typing, n) for n in ("Any", "Dict", "List", "Literal", "Optional", "Union")}
    common: dict = {"dataclass": dataclass, "field": field, **names}
    _compile(root / "sglang/srt/utils/common.py", ["ImageData", "VideoData"], common)
    sys.modules["sglang.srt.utils"].ImageData = common["ImageData"]
    sys.modules["sglang.srt.utils"].VideoData = common["VideoData"]

    import uuid

    io_ns: dict = {
        "dataclass": dataclass,
        "field": field,
        "uuid": uuid,
        "copy": __import__("copy"),
        "ImageData": common["ImageData"],
        "VideoData": common["VideoData"],
        # validates return_hidden_states, which these requests leave at its default
        "get_return_hidden_states_mode": lambda mode: None,
        **names,
    }
    _compile(root / "sglang/srt/managers/io_struct.py", ["GenerateReqInput"], io_ns)

    # the decode path of a CUDA server: load_image and what it calls
    class _Pybase64:
        @staticmethod
        def b64decode(data, validate=False):
            return base64.b64decode(data, validate=validate)

    def decode_jpeg(encoded, device=None):  # nvJPEG's stand-in: decodes without applying EXIF
        image = Image.open(io.BytesIO(encoded.numpy().tobytes())).convert("RGB")
        return torch.zeros((3, image.height, image.width), dtype=torch.uint8)

    tv = types.ModuleType("torchvision")
    tv_io = types.ModuleType("torchvision.io")
    tv_io.decode_jpeg = decode_jpeg
    tv.io = tv_io
    sys.modules.setdefault("torchvision", tv)
    sys.modules.setdefault("torchvision.io", tv_io)
    from io import BytesIO
    from urllib.parse import unquote, urlparse

    from PIL import ImageOps

    dec: dict = {
        "Image": Image,
        "ImageOps": ImageOps,
        "BytesIO": BytesIO,
        "torch": torch,
        "pybase64": _Pybase64,
        "os": os,
        "unquote": unquote,
        "urlparse": urlparse,
        "is_cuda": lambda: True,
        "logger": logging.getLogger("sglang-decode"),
        "ImageData": common["ImageData"],
        **names,
    }
    _compile(
        root / "sglang/srt/utils/common.py",
        ["image_extension_names", "GPUImageDecodeMode", "is_jpeg_with_cuda", "_load_image",
         "_fully_load_pil_image", "load_image", "get_image_bytes"],
        dec,
    )
    from sglang.srt.utils import log_utils, request_logger

    warmup: dict = {}
    _compile(root / "sglang/srt/entrypoints/http_server.py", ["MINIMUM_PNG_PICTURE_BASE64"], warmup)
    return types.SimpleNamespace(
        GenerateReqInput=io_ns["GenerateReqInput"],
        ImageData=common["ImageData"],
        load_image=dec["load_image"],
        RequestLogger=request_logger.RequestLogger,
        log_utils=log_utils,
        warmup_png=warmup["MINIMUM_PNG_PICTURE_BASE64"],
    )


def _noise(width: int, height: int, seed: int) -> Image.Image:
    """A flat image with a 32x32 patch of noise: small files whose base64 still runs past 2048 characters."""
    import random

    rng = random.Random(seed)
    image = Image.new("RGB", (width, height), (90 + seed, 120, 150))
    side = min(32, width, height)
    patch = Image.frombytes("RGB", (side, side), bytes(rng.getrandbits(8) for _ in range(side * side * 3)))
    image.paste(patch, (0, 0))
    return image


def _exif(orientation: int) -> bytes:
    exif = Image.Exif()
    exif[0x0112] = orientation
    return exif.tobytes()


def images() -> dict[str, bytes]:
    """Images of every format the tests need, made here (small, with noise so that JPEGs are long)."""
    out: dict[str, bytes] = {}

    def save(name: str, image: Image.Image, fmt: str, **kw) -> None:
        buf = io.BytesIO()
        image.save(buf, fmt, **kw)
        out[name] = buf.getvalue()

    save("png_rgb", _noise(640, 480, 1), "PNG")
    save("png_exif6", _noise(300, 500, 2), "PNG", exif=_exif(6))
    save("jpeg", _noise(1280, 720, 3), "JPEG", quality=85)
    save("jpeg_exif6", _noise(480, 640, 4), "JPEG", quality=85, exif=_exif(6))
    save("jpeg_exif8", _noise(600, 400, 5), "JPEG", quality=85, exif=_exif(8))
    save("jpeg_progressive", _noise(800, 600, 6), "JPEG", quality=85, progressive=True)
    save("gif", _noise(320, 240, 7).convert("P"), "GIF")
    save("webp_lossy", _noise(500, 300, 8), "WEBP", quality=80)
    save("webp_lossless", _noise(200, 100, 9), "WEBP", lossless=True)
    save("webp_exif6", _noise(333, 222, 10), "WEBP", quality=80, exif=_exif(6))
    return out


def _data_url(name: str, data: bytes) -> str:
    kind = {"png": "png", "jpe": "jpeg", "gif": "gif", "web": "webp"}[name[:3]]
    return f"data:image/{kind};base64,{base64.b64encode(data).decode()}"


def requests(sg, imgs: dict[str, bytes]) -> list[dict]:
    """The requests of the fixture log, in order: SGLang's warm-up first."""
    b64 = {k: base64.b64encode(v).decode() for k, v in imgs.items()}
    url = {k: _data_url(k, v) for k, v in imgs.items()}
    return [
        {"rid": "warmup0", "chat": True, "images": ["data:image/png;base64," + sg.warmup_png], "warmup": True},
        {"rid": "chat-png", "chat": True, "images": [url["png_rgb"]]},
        {"rid": "raw-b64-png", "chat": False, "single": b64["png_exif6"]},
        {"rid": "gen-three", "chat": False, "images": [url["jpeg"], url["gif"], url["webp_lossy"]]},
        {"rid": "chat-exif", "chat": True, "images": [url["jpeg_exif6"], url["jpeg_exif8"], url["webp_exif6"]]},
        {"rid": "chat-mixed", "chat": True, "images": [url["webp_lossless"], url["jpeg_progressive"]],
         "fields": {"max_dynamic_patch": 6}},
        {"rid": "text-only", "chat": False, "images": []},
        {"rid": "raw-b64-jpeg", "chat": False, "images": [b64["jpeg"]]},
        {"rid": ["batch-a", "batch-b"], "chat": False, "batch": [[url["png_rgb"]], [url["gif"]]]},
    ]


def example_requests(sg) -> list[dict]:
    """The example log's requests: SGLang's warm-up, then chat requests of one or two camera-sized images."""
    shots: dict[str, str] = {}
    for name, size, fmt, seed in (
        ("1080p", (1920, 1080), "JPEG", 11),
        ("720p", (1280, 720), "JPEG", 12),
        ("480p", (640, 480), "PNG", 13),
    ):
        buf = io.BytesIO()
        _noise(*size, seed).save(buf, fmt, **({"quality": 85} if fmt == "JPEG" else {}))
        shots[name] = _data_url("jpeg" if fmt == "JPEG" else "png", buf.getvalue())
    order = [["1080p"], ["720p"], ["1080p", "480p"], ["480p"], ["720p", "720p"], ["1080p"], ["480p"], ["720p"]]
    return [
        {"rid": "warmup0", "chat": True, "images": ["data:image/png;base64," + sg.warmup_png], "warmup": True},
        *({"rid": f"req-{n}", "chat": True, "images": [shots[k] for k in keys]} for n, keys in enumerate(order, 1)),
    ]


def _generate_input(sg, req: dict):
    if "batch" in req:
        obj = sg.GenerateReqInput(text=["Describe.", "Describe."], image_data=req["batch"], rid=req["rid"],
                                  sampling_params={"max_new_tokens": 8})
    elif "single" in req:
        obj = sg.GenerateReqInput(text="<image> Describe.", image_data=req["single"], rid=req["rid"],
                                  sampling_params={"max_new_tokens": 8})
    elif req["chat"]:
        # serving_chat hands the tokenizer ImageData objects (parser/jinja_template_utils.py:259)
        fields = req.get("fields", {})
        data = [sg.ImageData(url=u, detail="auto", max_dynamic_patch=fields.get("max_dynamic_patch"))
                for u in req["images"]]
        text = "Describe the image." if req.get("warmup") else "What is in these images?"
        obj = sg.GenerateReqInput(text=f"<|im_start|>user\n{text}<|im_end|>", image_data=data or None,
                                  rid=req["rid"], sampling_params={"temperature": 0.0, "max_new_tokens": 8})
    else:
        obj = sg.GenerateReqInput(text="<image> Describe.", image_data=req["images"] or None, rid=req["rid"],
                                  sampling_params={"max_new_tokens": 8})
    obj.normalize_batch_and_arguments()
    return obj


def _openai_body(req: dict) -> dict:
    text = "Describe the image." if req.get("warmup") else "What is in these images?"
    fields = req.get("fields", {})
    content = [{"type": "image_url", "image_url": {"url": u, **fields}} for u in req["images"]]
    body = {"model": "default", "messages": [{"role": "user", "content": [*content, {"type": "text", "text": text}]}]}
    if req.get("warmup"):  # entrypoints/http_server.py:2429-2451
        body |= {"max_tokens": 8, "stream": False, "temperature": 0.0}
    return body


class _Clock(logging.Filter):
    now = float(START)

    def filter(self, record: logging.LogRecord) -> bool:
        record.created = self.now
        record.msecs = (self.now % 1) * 1000
        return True


def write_log(sg, reqs: list[dict], fmt: str, level: int, path: Path) -> None:
    clock = _Clock()
    out = path.open("w", encoding="utf-8")
    sg.log_utils.datetime = type(
        "datetime", (), {"now": staticmethod(lambda: datetime.fromtimestamp(clock.now, UTC).replace(tzinfo=None))}
    )
    logger = sg.RequestLogger(log_requests=True, log_requests_level=level, log_requests_format=fmt,
                              log_requests_target=None)
    for target in logger.targets:
        for handler in target.handlers:
            handler.stream = out  # the handler outlives one RequestLogger: no flush of the last file
            for old in [f for f in handler.filters if isinstance(f, _Clock)]:
                handler.removeFilter(old)
            handler.addFilter(clock)

    def server(line: str, tp: bool = False) -> None:  # the server's own log lines, its prefix format
        stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(clock.now))
        out.write(f"[{stamp}{' TP0' if tp else ''}] {line}\n")

    server("server_args=ServerArgs(model_path='Qwen/Qwen2.5-VL-7B-Instruct', tp_size=1, ...)")
    server("Load weight begin. avail mem=78.50 GB", tp=True)
    server("CUDA IPC multimodal feature pools reserve 1024 MiB total on GPU 0 (1024 MiB per tokenizer worker × 1; "
           "configured budget 1024 MiB).")
    server("The server is fired up and ready to roll!")
    pending = []
    for n, req in enumerate(reqs):
        clock.now = START + 10 + n * 0.37  # several requests share a second in the text format
        if req["chat"]:
            logger.log_openai_received_request(_openai_body(req))
        obj = _generate_input(sg, req)
        logger.log_received_request(obj)
        pending.append((obj, req))
    for n, (obj, _req) in enumerate(pending):
        clock.now = START + 20 + n * 0.5
        rids = obj.rid if isinstance(obj.rid, list) else [obj.rid]
        for k, rid in enumerate(rids):
            queue = 12.5 + 7 * n + k
            server(f"ReqTimeStats(rid={rid}, input_len=120, cached_input_len=0, output_len=8, attempts=1, "
                   f"type=unified): queue_duration={queue:.2f}ms, forward_duration=85.00ms, "
                   f"entry_time={clock.now:.3f}", tp=True)
        out_obj = {"text": "An image.", "meta_info": {"id": rids[0], "prompt_tokens": 120, "completion_tokens": 8,
                                                      "e2e_latency": 0.45}}
        logger.log_finished_request(obj, out_obj)
    server("Decode batch, #running-req: 0, #token: 0, token usage: 0.00, gen throughput (token/s): 0.00", tp=True)
    out.close()


def expected(sg, reqs: list[dict]) -> dict:
    """Each request's images as SGLang's load_image decodes them on a CUDA server (or its error)."""
    result = {}
    for req in reqs:
        if "batch" in req:
            groups = dict(zip(req["rid"], req["batch"], strict=True))
        else:
            groups = {req["rid"]: [req["single"]] if "single" in req else req["images"]}
        for rid, refs in groups.items():
            items = []
            for ref in refs:
                try:
                    image, _ = sg.load_image(ref, True)
                except Exception as e:  # noqa: BLE001 - recorded: SGLang fails such a request
                    items.append({"error": f"{type(e).__name__}"})
                    continue
                if isinstance(image, Image.Image):
                    items.append({"width": image.width, "height": image.height, "decoder": "pil"})
                else:
                    items.append({"width": int(image.shape[2]), "height": int(image.shape[1]), "decoder": "nvjpeg"})
            result[rid] = {"items": items, "warmup": bool(req.get("warmup"))}
    return result


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--wheel", required=True, type=Path, help="the unpacked SGLang 0.5.23 wheel")
    p.add_argument("--out", type=Path, help="the test fixtures' folder")
    p.add_argument("--example", type=Path, help="the documentation's example log (examples/server.log)")
    args = p.parse_args()
    if args.out is None and args.example is None:
        p.error("give --out, --example or both")
    os.environ["TZ"] = "UTC"
    time.tzset()
    sys.path.insert(0, str(args.wheel))
    sg = load_sglang(args.wheel)
    if args.example is not None:
        write_log(sg, example_requests(sg), "json", 2, args.example)
    if args.out is None:
        return 0
    imgs = images()
    reqs = requests(sg, imgs)
    args.out.mkdir(parents=True, exist_ok=True)
    for fmt in ("text", "json"):
        for level in (2, 3):
            write_log(sg, reqs, fmt, level, args.out / f"server-{fmt}-level{level}.log")
    write_log(sg, reqs[:3], "json", 1, args.out / "server-json-level1.log")
    write_log(sg, reqs[:3], "text", 0, args.out / "server-text-level0.log")
    (args.out / "expected.json").write_text(json.dumps(
        {"sglang": "0.5.23", "requests": expected(sg, reqs)}, indent=1) + "\n")
    suffix = {"png": "png", "jpe": "jpg", "gif": "gif", "web": "webp"}
    (args.out / "images").mkdir(exist_ok=True)
    for name, data in imgs.items():
        (args.out / "images" / f"{name}.{suffix[name[:3]]}").write_bytes(data)
    return 0


if __name__ == "__main__":
    sys.exit(main())
