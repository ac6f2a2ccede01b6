"""Record what vLLM's own functions compute, for the tests to replay offline.

Maintainer-run only, like gen_vllm_tables.py (same ``--deps`` and wheel cache). With ``PYTHONPATH``
on the unpacked vLLM wheel it imports the functions that build mmpool's vLLM figures and calls
them on CPU, writing ``tests/data/vllm_fixtures.json``:

- ``maybe_init_mm_gpu_ipc_pool`` and ``MultiModalGPUMemoryPool.acquire`` (the GPU decode pool),
  ``reserve_mm_ipc_gpu_memory`` (what it takes from the KV cache);
- ``_get_cache_type`` (the processor cache layout) and the LRU capacity of
  ``MultiModalCache.get_lru_cache`` with ``put_if_fits``;
- ``EngineArgs.get_batch_defaults`` with the platform's device queries answered per GPU;
- ``compute_mm_encoder_budget``;
- the video loader of a request (``get_video_loader_backend_for_processor``, each loader's
  ``compute_frames_index_to_sample``) and, for Qwen3-VL, the HF video processor's own
  ``sample_frames`` when the loader keeps every frame;
- the Qwen2-VL / Qwen2.5-VL / Qwen3-VL processing info's token counts. Their module imports the
  whole model (and torchvision), so the methods are taken from the wheel's source by name and run
  on stand-in configs holding the checkpoints' processor settings; ``smart_resize`` comes from
  transformers' source the same way.

Usage::

    python scripts/record_vllm_fixtures.py --deps /tmp/vllm-deps [--version 0.34.0]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "tests" / "data" / "vllm_fixtures.json"

GIB_TEXTS = ["4", "1", "0.5", "0.1", "1e-7", "1e-9", "0.99999999999999999999", "3.7", "1.0000000001", "64", "100"]
PROCESS_COUNTS = [1, 2, 3, 4, 7, 8, 64, 107, 108, 1000]
IMAGES = [
    (1920, 1080),
    (1080, 1920),
    (3840, 2160),
    (640, 480),
    (224, 224),
    (28, 28),
    (10, 2000),
    (7680, 4320),
    (1280, 720),
    (4000, 3000),
    (100, 100),
    (56, 1000),
    (12000, 9000),
]
SEQ_LENS = [128_000, 32_768, 262_144, 8192, 16_384, 4096, 1_000_000]
# --video W x H : seconds : fps, and the --media-io-kwargs video keys of the launch
VIDEO_SPECS = [
    (1920, 1080, "30", "30"),
    (1280, 720, "1", "30"),
    (3840, 2160, "120", "24"),
    (640, 480, "0.5", "29.97"),
    (1920, 1080, "10", "1"),
    (854, 480, "3", "2.5"),
    (1080, 1920, "600", "60"),
    (1920, 1080, "0.1", "10"),
    (20, 3000, "5", "30"),
]
VIDEO_KWARGS = [
    {},
    {"num_frames": 8},
    {"fps": 1},
    {"num_frames": -1, "fps": 2},
    {"fps": 4},
    {"max_frames": 16, "min_frames": 2},
    {"video_backend": "pynvvideocodec"},
    {"video_backend": "opencv", "num_frames": 64},
]
VIDEOS = [(1920, 1080, 32), (1280, 720, 16), (640, 480, 2), (1920, 1080, 3), (3840, 2160, 64)]
API_ARGVS = [
    [],
    ["-dp", "4"],
    ["-dp", "4", "--data-parallel-rank", "1"],
    ["-dp", "4", "--data-parallel-external-lb"],
    ["-dp", "4", "--data-parallel-hybrid-lb", "--data-parallel-size-local", "2"],
    ["-dp", "4", "--data-parallel-start-rank", "2", "--data-parallel-size-local", "2"],
    ["-dp", "4", "--data-parallel-hybrid-lb"],
    ["-dp", "4", "--data-parallel-multi-port-external-lb"],
    ["-dp", "4", "--api-server-count", "2"],
    ["-dp", "4", "--api-server-count", "1"],
    ["--headless"],
    ["--headless", "-dp", "4"],
    ["-dp", "8", "--data-parallel-size-local", "4", "--data-parallel-hybrid-lb"],
]
GPUS = [
    (150_754_820_096, "NVIDIA H200", (9, 0)),
    (85_520_809_984, "NVIDIA H100 80GB HBM3", (9, 0)),
    (85_899_345_920, "NVIDIA A100-SXM4-80GB", (8, 0)),
    (47_697_362_944, "NVIDIA L40S", (8, 9)),
    (191_537_037_312, "NVIDIA B200", (10, 0)),
    (128_000_000_000, "NVIDIA GB10", (12, 1)),
    (75_161_927_680, "NVIDIA RTX PRO 6000", (12, 0)),
    (75_161_927_679, "NVIDIA X", (9, 0)),
    (171_798_691_840, "NVIDIA A100 (hypothetical)", (8, 0)),
]

CHILD = r"""
import ast, json, logging, math, sys, types
from types import SimpleNamespace as NS
sys.path.insert(0, SCRIPTS)
import vllm_dump
sys.meta_path.insert(0, vllm_dump._StandInFinder())
logging.disable(logging.CRITICAL)
out = {}

from vllm.multimodal import gpu_ipc_memory as g
rows = []
for text in GIB_TEXTS:
    for n in PROCESS_COUNTS:
        try:
            pool = g.maybe_init_mm_gpu_ipc_pool(float(text), n)
            rows.append({"gb": text, "processes": n, "total_bytes": pool.total_bytes})
        except ValueError as e:
            rows.append({"gb": text, "processes": n, "error": str(e)})
out["gpu_pool"] = rows
rows = []
for total, nbytes in [(107, 107), (107, 108), (1, 0), (1 << 30, (1 << 30) + 1), (5, 4)]:
    pool = g.MultiModalGPUMemoryPool(total)
    try:
        pool.acquire(nbytes).release()
        rows.append({"total": total, "nbytes": nbytes, "error": None})
    except ValueError as e:
        rows.append({"total": total, "nbytes": nbytes, "error": str(e)})
out["acquire"] = rows

from vllm.multimodal.video_decoders.pynvvideocodec import get_pynvvideocodec_decoder_gpu_memory_bytes
import vllm.config.multimodal as cm
rows = []
for gb in ("0", "1", "0.5", "1e-7"):
    for backend in (None, "pynvvideocodec"):
        for api in (1, 4):
            video = {} if backend is None else {"video_backend": backend}
            mm = NS(mm_ipc_gpu_memory_gb=float(gb), media_io_kwargs={"video": video} if video else {},
                    use_gpu_video_backend=lambda b=backend: b is not None)
            avail = 80 * 2**30
            try:
                rows.append({"gb": gb, "backend": backend, "api": api,
                             "remaining": g.reserve_mm_ipc_gpu_memory(avail, mm, api), "available": avail})
            except ValueError as e:
                rows.append({"gb": gb, "backend": backend, "api": api, "error": str(e), "available": avail})
out["reserve"] = rows
out["decoder_bytes_default"] = get_pynvvideocodec_decoder_gpu_memory_bytes(None, None)

from vllm.multimodal.cache import factories as f
rows = []
for gb in ("4", "0", "0.0"):
    for kind in ("lru", "shm"):
        for dp, api, ext in [(1, 1, False), (4, 4, False), (4, 1, False), (4, 1, True), (1, 2, False), (2, 2, True)]:
            mm = NS(mm_processor_cache_gb=float(gb), mm_processor_cache_type=kind)
            cfg = NS(model_config=NS(supports_multimodal_inputs=True, get_multimodal_config=lambda mm=mm: mm),
                     parallel_config=NS(_api_process_count=api, data_parallel_size=dp, data_parallel_external_lb=ext))
            rows.append({"gb": gb, "type": kind, "dp": dp, "api": api, "external_lb": ext,
                         "layout": f._get_cache_type(cfg)})
out["cache_type"] = rows

from vllm.multimodal.cache.base import MultiModalCache
rows = []
for text in GIB_TEXTS + ["inf"]:
    cache = MultiModalCache.get_lru_cache(float(text), dict)
    probe = [int(min(cache.maxsize, 2**62)) - 1, int(min(cache.maxsize, 2**62)), int(min(cache.maxsize, 2**62)) + 1]
    fits = []
    for size in probe:
        c = MultiModalCache.get_lru_cache(float(text), dict)
        c._Cache__getsizeof = lambda v, s=size: s  # cachetools' own size hook
        c.getsizeof = lambda v, s=size: s
        fits.append(c.put_if_fits("k", {}))
    rows.append({"gb": text, "maxsize": repr(cache.maxsize), "probe": probe, "fits": fits})
out["lru"] = rows

from vllm.engine import arg_utils
from vllm.usage.usage_lib import UsageContext
import vllm.engine.arg_utils as au
rows = []
for memory, name, cc in GPUS:
    plat = au.current_platform
    saved = {k: getattr(plat, k) for k in ("get_device_total_memory", "get_device_name", "is_device_capability",
                                            "is_tpu", "is_cpu")}
    try:
        plat.get_device_total_memory = lambda *a, m=memory: m
        plat.get_device_name = lambda *a, n=name: n
        plat.is_device_capability = lambda cap, c=cc: tuple(cap) == c
        plat.is_tpu = lambda: False
        plat.is_cpu = lambda: False
        tokens, seqs = arg_utils.EngineArgs.get_batch_defaults(1)
        rows.append({"memory": memory, "name": name, "capability": list(cc),
                     "server": tokens[UsageContext.OPENAI_API_SERVER], "offline": tokens[UsageContext.LLM_CLASS],
                     "server_seqs": seqs[UsageContext.OPENAI_API_SERVER]})
    finally:
        for k, v in saved.items():
            setattr(plat, k, v)
out["batch_defaults"] = rows

from vllm.v1.core.encoder_cache_manager import compute_mm_encoder_budget
rows = []
for mnbt, toks in [(8192, {"image": 16384, "video": 114688}), (8192, {"image": 16384}), (32768, {"image": 16384}),
                   (2048, {}), (16384, {"image": 2691})]:
    sc = NS(disable_chunked_mm_input=False, max_num_batched_tokens=mnbt, max_num_encoder_input_tokens=mnbt,
            encoder_cache_size=mnbt)
    rows.append({"max_num_batched_tokens": mnbt, "per_item": toks, "budget": list(compute_mm_encoder_budget(sc, toks))})
out["encoder_budget"] = rows

def function(path, name):
    src = open(path).read()
    tree = ast.parse(src)
    node = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == name)
    ns = {"math": math}
    exec(compile(ast.Module([node], []), path, "exec"), ns)
    return ns[name]

TF = TRANSFORMERS
image_smart_resize = function(TF + "/models/qwen2_vl/image_processing_qwen2_vl.py", "smart_resize")
video_smart_resize = function(TF + "/models/qwen3_vl/video_processing_qwen3_vl.py", "smart_resize")

class Qwen3VLVideoProcessor:
    def __init__(self, size, temporal_patch_size):
        self.size, self.temporal_patch_size = size, temporal_patch_size

def build(path, cls, names, base, extra):
    tree = ast.parse(open(path).read())
    node = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == cls)
    body = [i for i in node.body if isinstance(i, (ast.FunctionDef, ast.Assign)) and
            (not isinstance(i, ast.FunctionDef) or i.name in names)]
    new = ast.ClassDef(name=cls, bases=[ast.Name(id="_Base", ctx=ast.Load())], keywords=[], body=body,
                       decorator_list=[], type_params=[])
    ns = {"_Base": base, "Mapping": dict, "Literal": object, "Any": object, "cast": lambda t, v: v,
          "math": math} | extra
    ast.fix_missing_locations(new)
    import __future__
    exec(compile(ast.Module([new], []), path, "exec", flags=__future__.annotations.compiler_flag), ns)
    return ns[cls]

class ImageSize(tuple):
    def __new__(cls, width, height):
        t = super().__new__(cls, (width, height)); t.width, t.height = width, height; return t

NAMES2 = {"_get_vision_size", "get_mm_max_tokens_per_item", "_get_vision_info", "get_num_image_tokens",
          "get_num_video_tokens", "get_image_size_with_most_features", "get_max_image_tokens",
          "_get_max_video_frames", "get_num_frames_with_most_features", "get_max_video_tokens"}
M = VLLM + "/vllm/model_executor/models/"
tree2 = ast.parse(open(M + "qwen2_vl.py").read())
max_frames2 = next(n.value.value for n in tree2.body if isinstance(n, ast.Assign) and
                   ast.unparse(n.targets[0]) == "_MAX_FRAMES_PER_VIDEO")
tree3 = ast.parse(open(M + "qwen3_vl.py").read())
dummy3 = next(n.value.value for n in tree3.body if isinstance(n, ast.Assign) and
              ast.unparse(n.targets[0]) == "DUMMY_VIDEO_NUM_FRAMES")

class _Root:
    def __init__(self, vision, image_size, video_size=None):
        self._cfg = NS(vision_config=NS(**vision))
        self._image = NS(size=image_size)
        self._video = None if video_size is None else Qwen3VLVideoProcessor(video_size, vision["temporal_patch_size"])
    def get_hf_config(self):
        return self._cfg
    def get_image_processor(self, **kw):
        return self._image
    def get_video_processor(self, **kw):
        return self._video
    def _merge_and_resolve_mm_processor_kwargs(self, mm_kwargs):
        return dict(mm_kwargs)  # no --mm-processor-kwargs: the checkpoint's settings

common = {"smart_resize": image_smart_resize, "ImageSize": ImageSize, "_MAX_FRAMES_PER_VIDEO": max_frames2,
          "DUMMY_VIDEO_NUM_FRAMES": dummy3, "image_smart_resize": image_smart_resize,
          "video_smart_resize": video_smart_resize, "Qwen3VLVideoProcessor": Qwen3VLVideoProcessor,
          "Qwen2VLImageProcessor": object, "round_up": lambda x, y: ((x + y - 1) // y) * y}
Info2 = build(M + "qwen2_vl.py", "Qwen2VLProcessingInfo", NAMES2, _Root, common)
Info3 = build(M + "qwen3_vl.py", "Qwen3VLProcessingInfo", NAMES2, Info2, common)

families = {
    "qwen2.5-vl": Info2({"patch_size": 14, "spatial_merge_size": 2, "temporal_patch_size": 2},
                        {"shortest_edge": 3136, "longest_edge": 12845056}),
    "qwen3-vl": Info3({"patch_size": 16, "spatial_merge_size": 2, "temporal_patch_size": 2},
                      {"shortest_edge": 65536, "longest_edge": 16777216},
                      {"shortest_edge": 4096, "longest_edge": 25165824}),
}
fam_out = {}
for name, info in families.items():
    images = []
    for w, h in IMAGES:
        try:
            images.append({"w": w, "h": h, "tokens": info.get_num_image_tokens(
                image_width=w, image_height=h, image_processor=info.get_image_processor(), mm_kwargs={})})
        except ValueError as e:
            images.append({"w": w, "h": h, "error": str(e)[:200]})
    maxes = [{"seq_len": s, "image_only": dict(info.get_mm_max_tokens_per_item(s, {"image": 1})),
              "both": dict(info.get_mm_max_tokens_per_item(s, {"image": 1, "video": 1}))} for s in SEQ_LENS]
    videos = []
    proc = info.get_video_processor() or info.get_image_processor()
    for w, h, n in VIDEOS:
        try:
            videos.append({"w": w, "h": h, "frames": n, "tokens": info.get_num_video_tokens(
                image_width=w, image_height=h, num_frames=n, image_processor=proc, mm_kwargs={})})
        except ValueError as e:
            videos.append({"w": w, "h": h, "frames": n, "error": str(e)[:200]})
    fam_out[name] = {"images": images, "max_tokens_per_item": maxes, "videos": videos,
                     "most_features": list(info.get_image_size_with_most_features())}
out["families"] = fam_out

# one request's video: the loader vLLM picks (connector.py), the frames its sampling keeps
# (compute_frames_index_to_sample on the source metadata the OpenCV decoder reports), the frames
# HF's Qwen3-VL video processor resamples when the loader kept all (sample_frames, taken from
# transformers' source), and the processing info's tokens for them
import inspect
from fractions import Fraction
from vllm.multimodal import video as vmod
from vllm.multimodal.video_decoders import VideoSourceMetadata, VideoTargetMetadata
sample3 = None
tree_v3 = ast.parse(open(TF + "/models/qwen3_vl/video_processing_qwen3_vl.py").read())
cls_v3 = next(n for n in tree_v3.body if isinstance(n, ast.ClassDef) and n.name == "Qwen3VLVideoProcessor")
fn_v3 = next(n for n in cls_v3.body if isinstance(n, ast.FunctionDef) and n.name == "sample_frames")
ns_v3 = {"np": __import__("numpy"), "logger": logging.getLogger("x"), "VideoMetadata": object}
annotations_flag = __import__("__future__").annotations.compiler_flag
exec(compile(ast.Module([fn_v3], []), "sample_frames", "exec", flags=annotations_flag), ns_v3)
sample3 = ns_v3["sample_frames"]
consts3 = {ast.unparse(n.targets[0]): ast.literal_eval(n.value) for n in cls_v3.body
           if isinstance(n, ast.Assign) and ast.unparse(n.targets[0]) in ("fps", "min_frames", "max_frames")}
video_processor_names = {"qwen2.5-vl": "Qwen2VLVideoProcessor", "qwen3-vl": "Qwen3VLVideoProcessor"}
rows = []
for name, info in families.items():
    proc = info.get_video_processor() or info.get_image_processor()
    auto = vmod.get_video_loader_backend_for_processor(video_processor_names[name])
    for w, h, seconds, fps_text in VIDEO_SPECS:
        total = int(Fraction(seconds) * Fraction(fps_text))
        source_fps = float(fps_text)
        for given in VIDEO_KWARGS:
            kw = dict(given)
            loader_name = kw.pop("video_backend", None) or auto or "opencv"
            cls = vmod.VIDEO_LOADER_REGISTRY.load(loader_name)
            params = inspect.signature(cls.load_bytes).parameters
            target = VideoTargetMetadata(num_frames=kw.pop("num_frames", 32),
                                         fps=kw.pop("fps", params["fps"].default), max_duration=300)
            source = VideoSourceMetadata(total, source_fps, total / source_fps)
            row = {"family": name, "w": w, "h": h, "seconds": seconds, "fps": fps_text, "media_io": given,
                   "loader": loader_name}
            try:
                idx = cls.compute_frames_index_to_sample(source, target, **kw)
            except (ValueError, ZeroDivisionError) as e:
                rows.append(row | {"error": f"{type(e).__name__}: {e}"[:200]})
                continue
            frames = len(set(idx))  # the OpenCV reader decodes each distinct index once
            if name == "qwen3-vl" and frames == total:  # do_sample_frames: HF samples again
                me = NS(**consts3)
                frames = len(sample3(me, NS(total_num_frames=total, fps=source_fps)))
            row["loader_frames"], row["frames"] = len(set(idx)), frames
            try:
                row["tokens"] = info.get_num_video_tokens(image_width=w, image_height=h, num_frames=frames,
                                                          image_processor=proc, mm_kwargs={})
            except ValueError as e:
                row["error"] = str(e)[:200]
            rows.append(row)
out["video_requests"] = rows

# serve.py's defaulting of --api-server-count, run on the release's own parser with the launchers
# replaced by recorders (nothing starts)
import vllm.entrypoints.cli.serve as serve
from vllm.entrypoints.common.cli_args import make_arg_parser as _map
from vllm.utils.argparse_utils import FlexibleArgumentParser as _FAP
parser = _map(_FAP(prog="vllm serve"))
rows = []
for argv in API_ARGVS:
    ns = parser.parse_args(["m", *argv])
    seen = {}
    serve.run_dp_supervisor = lambda a: seen.setdefault("mode", "multi-port")
    serve.run_headless = lambda a: seen.setdefault("mode", "headless")
    serve.run_multi_api_server = lambda a: seen.setdefault("mode", "multi-api")
    serve.uvloop = NS(run=lambda coro: (coro.close(), seen.setdefault("mode", "single")))
    serve.run_server = lambda a: NS(close=lambda: None)
    try:
        serve.ServeSubcommand.cmd(ns)
        count = ns.api_server_count
        rows.append({"argv": argv, "api_server_count": 1 if count is None else count, "mode": seen.get("mode")})
    except ValueError as e:
        rows.append({"argv": argv, "error": str(e)[:300]})
out["api_server_count"] = rows
json.dump(out, sys.stdout, indent=None)
"""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--python", default=sys.executable)
    parser.add_argument("--deps", type=Path, required=True)
    parser.add_argument("--cache", type=Path, default=Path("/tmp/mmpool-vllm-wheels"))
    parser.add_argument("--version", default="0.34.0")
    args = parser.parse_args()
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import gen_vllm_tables

    constants = {
        "GIB_TEXTS": GIB_TEXTS,
        "PROCESS_COUNTS": PROCESS_COUNTS,
        "IMAGES": IMAGES,
        "SEQ_LENS": SEQ_LENS,
        "VIDEOS": VIDEOS,
        "VIDEO_SPECS": VIDEO_SPECS,
        "VIDEO_KWARGS": VIDEO_KWARGS,
        "GPUS": GPUS,
        "API_ARGVS": API_ARGVS,
    }
    found = gen_vllm_tables.run_on_vllm(args.python, args.deps, args.cache, args.version, constants, CHILD, timeout=900)
    data = {"generator": "scripts/record_vllm_fixtures.py", "vllm": args.version, **found}
    OUT.write_text(json.dumps(data, indent=1) + "\n")
    print(f"wrote {OUT.relative_to(ROOT)}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
