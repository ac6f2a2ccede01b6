"""Record what SGLang 0.5.23 and transformers 5.19 make of Qwen-VL model directories' processor configs.

For each case (a model directory's processor files, a video ``WxH:SECONDS:FPS``, the environment)
the directory is written with a tiny tokenizer, loaded with ``AutoProcessor.from_pretrained`` and
the keyword arguments SGLang's ``get_processor`` adds (``utils/hf_transformers/processor.py:312-314``),
and a video is put through the wheel's own ``preprocess_video`` (``multimodal/processors/qwen_vl.py``,
compiled from the wheel's source with its module constants, ``VIDEO_MAX_PIXELS`` read from the case's
environment) and then through the processor, called as SGLang calls it (``video_metadata`` and
``do_sample_frames=False`` for Qwen3-VL). One 1920x1080 image goes through the same processor. Frames
are tensors on PyTorch's ``meta`` device: shapes and dtypes are real, no pixel is stored, so a
768-frame 1080p video costs nothing. The shapes and bytes of ``pixel_values_videos`` and
``pixel_values`` go to the record with the cases, which ``tests/workload/test_hf_processor.py``
rebuilds and sizes with mmpool.

    python scripts/record_qwen_video_processors.py --wheel /work/cache/sglang/src \\
        --out tests/workload/data/qwen-video-processors.json

Needs torch, torchvision, numpy, tokenizers and transformers 5.19. A torchvision wheel built for CUDA
beside a CPU torch loads without its compiled operators (which the resize does not use) once the
two operators its module registers fakes for are declared; ``--cpu-torchvision-shim`` does that.
"""

from __future__ import annotations

import argparse
import ast
import asyncio
import copy
import glob
import importlib.util
import json
import logging
import math
import os
import tempfile
import time
from fractions import Fraction
from pathlib import Path
from typing import Any

Q25_PRE = {
    "min_pixels": 3136,
    "max_pixels": 12845056,
    "patch_size": 14,
    "temporal_patch_size": 2,
    "merge_size": 2,
    "image_processor_type": "Qwen2VLImageProcessor",
    "processor_class": "Qwen2_5_VLProcessor",
}
Q3_PRE = {
    "size": {"longest_edge": 16777216, "shortest_edge": 65536},
    "patch_size": 16,
    "temporal_patch_size": 2,
    "merge_size": 2,
    "image_processor_type": "Qwen2VLImageProcessorFast",
    "processor_class": "Qwen3VLProcessor",
}
Q3_VIDEO = {
    "size": {"longest_edge": 25165824, "shortest_edge": 4096},
    "patch_size": 16,
    "temporal_patch_size": 2,
    "merge_size": 2,
    "processor_class": "Qwen3VLProcessor",
    "video_processor_type": "Qwen3VLVideoProcessor",
}
PRE, VIDEO, PROC = "preprocessor_config.json", "video_preprocessor_config.json", "processor_config.json"
LOWERED = {"VIDEO_MAX_PIXELS": "9031680"}


def _without(d: dict[str, Any], *keys: str) -> dict[str, Any]:
    return {k: v for k, v in d.items() if k not in keys}


CASES: list[dict[str, Any]] = [
    {
        "name": "qwen2.5 official, defaults",
        "model_type": "qwen2_5_vl",
        "files": {PRE: Q25_PRE},
        "video": "1920x1080:30:30",
        "env": {},
    },
    {
        "name": "qwen2.5 official, VIDEO_MAX_PIXELS lowered (issue 24)",
        "model_type": "qwen2_5_vl",
        "files": {PRE: Q25_PRE},
        "video": "2520x720:384:30",
        "env": LOWERED,
    },
    {
        "name": "qwen2.5 official, VIDEO_MAX_PIXELS=1000000",
        "model_type": "qwen2_5_vl",
        "files": {PRE: Q25_PRE},
        "video": "1920x1080:10:30",
        "env": {"VIDEO_MAX_PIXELS": "1000000"},
    },
    {
        "name": "qwen2.5, nested video_processor",
        "model_type": "qwen2_5_vl",
        "files": {
            PRE: Q25_PRE,
            PROC: {
                "processor_class": "Qwen2_5_VLProcessor",
                "video_processor": {
                    "video_processor_type": "Qwen2VLVideoProcessor",
                    "size": {"shortest_edge": 200704, "longest_edge": 401408},
                },
            },
        },
        "video": "1920x1080:10:30",
        "env": {},
    },
    {
        "name": "qwen2.5, nested image_processor",
        "model_type": "qwen2_5_vl",
        "files": {
            PRE: Q25_PRE,
            PROC: {"processor_class": "Qwen2_5_VLProcessor", "image_processor": {**Q25_PRE, "max_pixels": 401408}},
        },
        "video": "1280x720:5:24",
        "env": {},
    },
    {
        "name": "qwen2.5, video config with max_pixels only",
        "model_type": "qwen2_5_vl",
        "files": {PRE: Q25_PRE, VIDEO: {"max_pixels": 401408}},
        "video": "1920x1080:10:30",
        "env": {"VIDEO_MAX_PIXELS": "1000000"},
    },
    {
        "name": "qwen3 official",
        "model_type": "qwen3_vl",
        "files": {PRE: Q3_PRE, VIDEO: Q3_VIDEO},
        "video": "1920x1080:30:30",
        "env": {},
    },
    {
        "name": "qwen3, video config without size",
        "model_type": "qwen3_vl",
        "files": {PRE: Q3_PRE, VIDEO: _without(Q3_VIDEO, "size")},
        "video": "1920x1080:30:30",
        "env": {},
    },
    {
        "name": "qwen3, video config with flat bounds only",
        "model_type": "qwen3_vl",
        "files": {PRE: Q3_PRE, VIDEO: {**_without(Q3_VIDEO, "size"), "min_pixels": 4096, "max_pixels": 25165824}},
        "video": "640x480:60:30",
        "env": {},
    },
    {
        "name": "qwen3, no video config",
        "model_type": "qwen3_vl",
        "files": {PRE: Q3_PRE},
        "video": "1280x720:20:24",
        "env": {},
    },
    {
        "name": "qwen3, no video config, Qwen2VLImageProcessor",
        "model_type": "qwen3_vl",
        "files": {PRE: {**Q3_PRE, "image_processor_type": "Qwen2VLImageProcessor"}},
        "video": "1280x720:20:24",
        "env": {},
    },
    {
        "name": "qwen3, image config without patch_size or size",
        "model_type": "qwen3_vl",
        "files": {PRE: _without(Q3_PRE, "patch_size", "size"), VIDEO: Q3_VIDEO},
        "video": "1280x720:5:24",
        "env": {},
    },
    {
        "name": "qwen2.5, cap_pixels_per_frame with max_video_tokens 4000",
        "model_type": "qwen2_5_vl",
        "files": {PRE: Q25_PRE, VIDEO: {**Q25_PRE, "cap_pixels_per_frame": True, "max_video_tokens": 4000}},
        "video": "1920x1080:30:30",
        "env": {},
    },
    {
        "name": "qwen3, cap_pixels_per_frame with max_video_tokens 100",
        "model_type": "qwen3_vl",
        "files": {PRE: Q3_PRE, VIDEO: {**Q3_VIDEO, "cap_pixels_per_frame": True, "max_video_tokens": 100}},
        "video": "1920x1080:30:30",
        "env": {},
    },
    {
        "name": "qwen3, cap_pixels_per_frame, the class's max_video_tokens",
        "model_type": "qwen3_vl",
        "files": {PRE: Q3_PRE, VIDEO: {**Q3_VIDEO, "cap_pixels_per_frame": True}},
        "video": "1280x720:200:24",
        "env": {},
    },
    {
        "name": "qwen2 official",
        "model_type": "qwen2_vl",
        "files": {PRE: {**Q25_PRE, "processor_class": "Qwen2VLProcessor"}},
        "video": "1920x1080:10:30",
        "env": LOWERED,
    },
    {
        "name": "qwen2, size only (SGLang's size kwarg replaces it)",
        "model_type": "qwen2_vl",
        "files": {
            PRE: {
                **_without(Q25_PRE, "min_pixels", "max_pixels"),
                "processor_class": "Qwen2VLProcessor",
                "size": {"shortest_edge": 3136, "longest_edge": 12845056},
            }
        },
        "video": "1920x1080:10:30",
        "env": {},
    },
]
IMAGE = (1920, 1080)
ARCH = {
    "qwen2_vl": "Qwen2VLForConditionalGeneration",
    "qwen2_5_vl": "Qwen2_5_VLForConditionalGeneration",
    "qwen3_vl": "Qwen3VLForConditionalGeneration",
}
SPECIALS = [
    "<|endoftext|>",
    "<|im_start|>",
    "<|im_end|>",
    "<|vision_start|>",
    "<|vision_end|>",
    "<|image_pad|>",
    "<|video_pad|>",
]
# SGLang's get_processor (utils/hf_transformers/processor.py:312-314)
SGLANG_KWARGS = {"qwen2_vl": {"size": {"shortest_edge": 3136, "longest_edge": 1003520}}}
_CONSTANTS = {
    "IMAGE_FACTOR",
    "MAX_RATIO",
    "VIDEO_TOTAL_PIXELS",
    "VIDEO_MIN_PIXELS",
    "VIDEO_MAX_PIXELS",
    "FRAME_FACTOR",
    "FPS",
    "FPS_MIN_FRAMES",
    "FPS_MAX_FRAMES",
}
_FUNCTIONS = {
    "smart_resize",
    "round_by_factor",
    "ceil_by_factor",
    "floor_by_factor",
    "smart_nframes",
    "preprocess_video",
}


def shim_cpu_torchvision() -> None:
    import torch

    spec = importlib.util.find_spec("torchvision")
    if spec is None or spec.origin is None:
        raise SystemExit("torchvision is not installed: transformers' video processors need it")
    try:
        torch.ops.load_library(glob.glob(os.path.join(os.path.dirname(spec.origin), "_C*.so"))[0])
    except OSError:
        for op in ("nms", "qnms"):
            torch.library.define(f"torchvision::{op}", "(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")


class FakeDecoder:
    """SGLang's VideoDecoderWrapper as preprocess_video uses it: len(), avg_fps, frames as NHWC uint8."""

    def __init__(self, frames: int, fps: float, height: int, width: int) -> None:
        self.frames, self.avg_fps, self.height, self.width = frames, fps, height, width

    def __len__(self) -> int:
        return self.frames

    def get_frames_as_tensor(self, indices: list[int]) -> Any:
        import torch

        return torch.empty((len(indices), self.height, self.width, 3), dtype=torch.uint8, device="meta")


def sglang_preprocess(wheel: Path, environ: dict[str, str]) -> Any:
    """The wheel's preprocess_video, compiled from its source with VIDEO_MAX_PIXELS from ``environ``."""
    import numpy as np
    import torch
    import torchvision
    from torchvision.transforms import InterpolationMode

    path = wheel / "sglang" / "srt" / "multimodal" / "processors" / "qwen_vl.py"
    tree = ast.parse(path.read_text())
    body = []
    for node in tree.body:
        constant = isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id in _CONSTANTS for t in node.targets
        )
        function = isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name in _FUNCTIONS
        if constant or function:
            body.append(node)
    found = {n.name for n in body if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)}
    assert found == _FUNCTIONS, f"{path} no longer defines {_FUNCTIONS - found}"
    fake_os = type("os", (), {"environ": dict(environ)})
    namespace: dict[str, Any] = {
        "math": math,
        "np": np,
        "torch": torch,
        "torchvision": torchvision,
        "InterpolationMode": InterpolationMode,
        "time": time,
        "os": fake_os,
        "logger": logging.getLogger("sglang"),
        "is_cpu": lambda: True,
        "VideoDecoderWrapper": FakeDecoder,
        "MIN_PIXELS": 4 * 28 * 28,
        "MAX_PIXELS": 16384 * 28 * 28,
    }
    exec(compile(ast.Module(body=body, type_ignores=[]), str(path), "exec"), namespace)
    return namespace["preprocess_video"]


def write_model(directory: Path, case: dict[str, Any]) -> None:
    from tokenizers import Tokenizer, models

    tok = Tokenizer(models.WordLevel({t: i for i, t in enumerate([*SPECIALS, "[UNK]"])}, unk_token="[UNK]"))
    tok.add_special_tokens(SPECIALS)
    tok.save(str(directory / "tokenizer.json"))
    (directory / "tokenizer_config.json").write_text(json.dumps({"tokenizer_class": "PreTrainedTokenizerFast"}))
    config = {"model_type": case["model_type"], "architectures": [ARCH[case["model_type"]]]}
    (directory / "config.json").write_text(json.dumps(config))
    for name, content in case["files"].items():
        (directory / name).write_text(json.dumps(content))


def run_case(wheel: Path, case: dict[str, Any]) -> dict[str, Any]:
    import torch
    from transformers import AutoProcessor

    size, seconds, fps = case["video"].split(":")
    width, height = (int(x) for x in size.split("x"))
    frames = math.floor(Fraction(seconds) * Fraction(fps))
    with tempfile.TemporaryDirectory() as tmp:
        write_model(Path(tmp), case)
        processor = AutoProcessor.from_pretrained(tmp, **copy.deepcopy(SGLANG_KWARGS.get(case["model_type"], {})))
    preprocess = sglang_preprocess(wheel, case["env"])
    video, metadata = asyncio.run(preprocess(FakeDecoder(frames, float(Fraction(fps)), height, width)))
    kwargs: dict[str, Any] = {}
    if case["model_type"].startswith("qwen3"):
        kwargs = {"video_metadata": [metadata], "do_sample_frames": False}  # qwen_vl.py:1041-1056
    out = processor(text=["<|vision_start|><|video_pad|><|vision_end|>"], videos=[video], return_tensors="pt", **kwargs)
    pv = out["pixel_values_videos"]
    image = torch.empty((3, IMAGE[1], IMAGE[0]), dtype=torch.uint8, device="meta")
    img = processor(text=["<|vision_start|><|image_pad|><|vision_end|>"], images=[image], return_tensors="pt")
    pi = img["pixel_values"]
    return {
        **case,
        "sglang_frames": list(video.shape[:1]) + list(video.shape[2:]),
        "video_shape": list(pv.shape),
        "video_bytes": pv.numel() * pv.element_size(),
        "image": f"{IMAGE[0]}x{IMAGE[1]}",
        "image_shape": list(pi.shape),
        "image_bytes": pi.numel() * pi.element_size(),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--wheel", type=Path, required=True, help="an unpacked sglang 0.5.23 wheel")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--cpu-torchvision-shim", action="store_true")
    args = parser.parse_args()
    if args.cpu_torchvision_shim:
        shim_cpu_torchvision()
    import transformers

    transformers.logging.set_verbosity_error()
    record = {
        "transformers": transformers.__version__,
        "sglang": "0.5.23",
        "cases": [run_case(args.wheel, case) for case in CASES],
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(record, indent=1) + "\n")
    for c in record["cases"]:
        print(f"{c['name']}: frames {c['sglang_frames']} -> {c['video_bytes']:,} B; image {c['image_bytes']:,} B")


if __name__ == "__main__":
    main()
