"""Run vLLM's own processing on images and record what its caches see: each item's tensors and bytes, and hits.

Maintainer-run only, like record_vllm_cache_fixtures.py (same ``--deps`` folder and wheel cache;
it also needs torchvision, ``pip install --no-deps --target DIR torchvision==0.28.0``: its
PyPI wheel is a CUDA build whose compiled ops do not load beside a CPU torch, so its meta
registrations, the one part that needs them, are stood in; the transforms the HF image
processors use are plain torch). With ``PYTHONPATH`` on the unpacked vLLM wheel it builds, on CPU:

- a local model folder per family (``config.json`` with the checkpoint's architecture, dtype and
  vision settings, its ``preprocessor_config.json``, a tiny word-level tokenizer holding the
  processor's special tokens): Qwen2.5-VL and Gemma 3, nothing from a hub;
- vLLM's ``ModelConfig`` for it with ``--dtype auto`` and ``--mm-device-do-normalize`` unset (the
  CLI's default), on and off: the release resolves the flag itself from the model class's
  ``supports_mm_device_do_normalize`` (the registry inspects the class in this process instead of
  a subprocess, which would lack the stand-ins);
- the model's multimodal processor (``MULTIMODAL_REGISTRY.create_processor``) and, per image,
  its ``_cached_apply_hf_processor`` without a cache: the HF processor with the kwargs vLLM merges
  in, the processing context's cast, the model's field factory. Recorded: each tensor's dtype,
  shape and ``nbytes``, and ``MultiModalCache.get_item_size``;
- for ``--traffic`` releases (0.34.0 by default), 120 requests of 1-3 images out of 36 distinct
  ones, each through ``_cached_apply_hf_processor`` with the ``lru`` sender cache
  (``processor_cache_from_config``) and the engine core's receiver cache
  (``engine_receiver_cache_from_config``), as a request's items travel in vLLM, at several
  ``--mm-processor-cache-gb``: the sender's hits and lookups, and each request's hit flags.

The images are deterministic noise (the cache keys are vLLM's own hashes of their pixels). Writes
``tests/data/vllm_item_fixtures.json``: one document of every release given.

Usage::

    pip install --no-deps --target /tmp/vllm-tv torchvision==0.28.0
    python scripts/record_vllm_item_fixtures.py --deps /tmp/vllm-deps --extra-path /tmp/vllm-tv \\
        [--versions 0.30.0 0.31.0 0.32.0 0.33.0 0.34.0] [--traffic 0.34.0] [--update]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "tests" / "data" / "vllm_item_fixtures.json"
VERSIONS = ["0.30.0", "0.31.0", "0.32.0", "0.33.0", "0.34.0"]
CACHE_GIB = ["0.005", "0.01", "0.03", "0.05", "0.1", "0.2"]

CHILD = r"""
import dataclasses, json, logging, os, random, sys, tempfile, types, uuid
sys.path.insert(0, SCRIPTS)
import vllm_dump
sys.meta_path.insert(0, vllm_dump._StandInFinder())
sys.path[1:1] = EXTRA_PATH
sys.modules["torchvision._meta_registrations"] = types.ModuleType("torchvision._meta_registrations")
logging.disable(logging.CRITICAL)
import numpy as np
import torch
from PIL import Image
from tokenizers import Tokenizer, models, pre_tokenizers
import vllm.envs as envs
from vllm.config import ModelConfig
from vllm.model_executor.models import registry
from vllm.multimodal import MULTIMODAL_REGISTRY
from vllm.multimodal.inputs import MultiModalFeatureSpec, PlaceholderRange
from vllm.multimodal.processing import inputs as processing_inputs
from vllm.multimodal.processing.context import TimingContext
try:
    from vllm.multimodal.cache import factories
    from vllm.multimodal.cache.base import MultiModalCache, MultiModalCacheMissError
except ImportError:  # 0.30.0, 0.31.0: one module, the factories are the registry's methods
    from vllm.multimodal import MULTIMODAL_REGISTRY as factories
    from vllm.multimodal.cache import MultiModalCache, MultiModalCacheMissError
    factories.supports_multimodal_inputs = lambda model_config: True

registry._run_in_subprocess = lambda fn: fn()  # inspect the model class here, where the stand-ins are

def tokenizer(path, special, extra):
    # the newline runs are looked up by Gemma 3's prompt updates (they never reach the pixels)
    vocab = {t: i for i, t in enumerate(special + ["hello", "image", "\n", "\n\n", "\n\n\n", "\n\n\n\n"])}
    tok = Tokenizer(models.WordLevel(vocab, unk_token=special[0]))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.add_special_tokens(special)
    tok.save(os.path.join(path, "tokenizer.json"))
    json.dump({"tokenizer_class": "PreTrainedTokenizerFast", "model_max_length": 1 << 20, **extra},
              open(os.path.join(path, "tokenizer_config.json"), "w"))
    return vocab

def write(path, name, obj):
    json.dump(obj, open(os.path.join(path, name), "w"))

def qwen25(path):
    # Qwen/Qwen2.5-VL-7B-Instruct's config and preprocessor config (the values processing reads)
    os.makedirs(path)
    v = tokenizer(path, ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|vision_start|>", "<|vision_end|>",
                         "<|image_pad|>", "<|video_pad|>"], {"eos_token": "<|im_end|>", "pad_token": "<|endoftext|>"})
    write(path, "config.json", {
        "architectures": ["Qwen2_5_VLForConditionalGeneration"], "model_type": "qwen2_5_vl",
        "torch_dtype": "bfloat16", "hidden_size": 3584, "intermediate_size": 18944, "num_attention_heads": 28,
        "num_hidden_layers": 28, "num_key_value_heads": 4, "vocab_size": 152064, "max_position_embeddings": 128000,
        "rms_norm_eps": 1e-6, "rope_theta": 1000000.0, "rope_scaling": {"type": "mrope", "mrope_section": [16, 24, 24]},
        "image_token_id": v["<|image_pad|>"], "video_token_id": v["<|video_pad|>"],
        "vision_start_token_id": v["<|vision_start|>"], "vision_end_token_id": v["<|vision_end|>"],
        "eos_token_id": v["<|im_end|>"], "bos_token_id": v["<|endoftext|>"],
        "vision_config": {"depth": 32, "hidden_act": "silu", "hidden_size": 1280, "intermediate_size": 3420,
                          "num_heads": 16, "in_chans": 3, "out_hidden_size": 3584, "patch_size": 14,
                          "spatial_merge_size": 2, "spatial_patch_size": 14, "window_size": 112,
                          "fullatt_block_indexes": [7, 15, 23, 31], "tokens_per_second": 2, "temporal_patch_size": 2}})
    write(path, "preprocessor_config.json", {
        "min_pixels": 3136, "max_pixels": 12845056, "patch_size": 14, "temporal_patch_size": 2, "merge_size": 2,
        "image_mean": [0.48145466, 0.4578275, 0.40821073], "image_std": [0.26862954, 0.26130258, 0.27577711],
        "image_processor_type": "Qwen2VLImageProcessor", "processor_class": "Qwen2_5_VLProcessor"})
    return [v["<|vision_start|>"], v["<|image_pad|>"], v["<|vision_end|>"]]

def gemma3(path):
    # google/gemma-3-4b-it's config, preprocessor config and processor config
    os.makedirs(path)
    special = ["<pad>", "<eos>", "<bos>", "<unk>", "<start_of_image>", "<end_of_image>", "<image_soft_token>"]
    v = tokenizer(path, special,
                  {"bos_token": "<bos>", "eos_token": "<eos>", "pad_token": "<pad>", "unk_token": "<unk>",
                   "extra_special_tokens": {"boi_token": "<start_of_image>", "eoi_token": "<end_of_image>",
                                            "image_token": "<image_soft_token>"}})
    write(path, "config.json", {
        "architectures": ["Gemma3ForConditionalGeneration"], "model_type": "gemma3", "torch_dtype": "bfloat16",
        "mm_tokens_per_image": 256, "boi_token_index": v["<start_of_image>"], "eoi_token_index": v["<end_of_image>"],
        "image_token_index": v["<image_soft_token>"],
        "text_config": {"model_type": "gemma3_text", "hidden_size": 2560, "intermediate_size": 10240,
                        "num_attention_heads": 8, "num_hidden_layers": 34, "num_key_value_heads": 4, "head_dim": 256,
                        "vocab_size": 262208, "max_position_embeddings": 131072, "sliding_window": 1024,
                        "rope_scaling": {"factor": 8.0, "rope_type": "linear"}},
        "vision_config": {"model_type": "siglip_vision_model", "image_size": 896, "patch_size": 14,
                          "hidden_size": 1152, "intermediate_size": 4304, "num_attention_heads": 16,
                          "num_hidden_layers": 27, "vision_use_head": False}})
    write(path, "preprocessor_config.json", {
        "image_processor_type": "Gemma3ImageProcessor", "processor_class": "Gemma3Processor",
        "size": {"height": 896, "width": 896}, "image_mean": [0.5, 0.5, 0.5], "image_std": [0.5, 0.5, 0.5],
        "do_normalize": True, "do_rescale": True, "rescale_factor": 0.00392156862745098, "resample": 2,
        "do_resize": True, "do_convert_rgb": None, "do_pan_and_scan": None, "pan_and_scan_max_num_crops": None,
        "pan_and_scan_min_crop_size": None, "pan_and_scan_min_ratio_to_activate": None})
    write(path, "processor_config.json", {"image_seq_length": 256, "processor_class": "Gemma3Processor"})
    return [v["<start_of_image>"]]

ROOT_DIR = tempfile.mkdtemp(prefix="mmpool-vllm-items-")
BUILD = {"qwen2.5-vl": qwen25, "gemma3": gemma3}

rng = random.Random(40)
SIZES = [(1920, 1080), (1280, 720), (640, 480), (1024, 768), (800, 600), (448, 336), (224, 224), (300, 1000),
         (1080, 1920), (1600, 1200), (28, 28), (500, 375)]
IMAGES = []
for i in range(DISTINCT):
    w, h = SIZES[i % len(SIZES)]
    pixels = np.random.default_rng(i).integers(0, 256, (h, w, 3), dtype=np.uint8)
    IMAGES.append(Image.fromarray(pixels))
REQUESTS = []
for _ in range(REQUEST_COUNT):
    k = rng.choice([1, 1, 2, 2, 3])
    REQUESTS.append([min(int(rng.paretovariate(0.9)) - 1, DISTINCT - 1) for _ in range(k)])

def model_config(path, norm):
    return ModelConfig(model=path, tokenizer=path, dtype="auto", mm_device_do_normalize=norm)

def run_inputs(proc, prompt, images, cache):
    items = proc.info.parse_mm_data({"image": images})
    kw = {"prompt": prompt, "mm_data_items": items}
    if "cache" in {f.name for f in dataclasses.fields(processing_inputs.ProcessorInputs)}:
        kw["cache"] = cache
    else:  # 0.30.0, 0.31.0: the processor holds its cache
        proc.cache = cache
    return proc._cached_apply_hf_processor(processing_inputs.ProcessorInputs(**kw), TimingContext(enabled=False))

def tensors(item):
    out = {}
    for name, elem in sorted(item.items()):
        data = elem.data
        if isinstance(data, torch.Tensor):
            out[name] = {"dtype": str(data.dtype).removeprefix("torch."), "shape": list(data.shape),
                         "nbytes": data.nbytes}
        else:
            out[name] = {"type": type(data).__name__}
    return out

def config(gb, kind="lru"):
    mm = types.SimpleNamespace(mm_processor_cache_gb=gb, mm_processor_cache_type=kind,
                               mm_shm_cache_max_object_size_mb=128)
    model = types.SimpleNamespace(supports_multimodal_inputs=True, get_multimodal_config=lambda: mm)
    par = types.SimpleNamespace(_api_process_count=1, data_parallel_size=1, data_parallel_external_lb=False,
                                world_size=1)
    return types.SimpleNamespace(model_config=model, parallel_config=par)

def traffic(proc, prompt_of, gib):
    cfg = config(float(gib))
    layout = factories._get_cache_type(cfg)
    sender = factories.processor_cache_from_config(cfg)
    receiver = factories.engine_receiver_cache_from_config(cfg)
    failed, missed = [], []
    for n, req in enumerate(REQUESTS):
        try:
            result = run_inputs(proc, prompt_of(len(req)), [IMAGES[i] for i in req], sender)
        except AssertionError:  # the request evicted an item it had found cached: vLLM fails it
            failed.append(n)
            continue
        hashes = result.hashes["image"]
        kwargs = result.kwargs["image"]
        features = [MultiModalFeatureSpec(data=d, modality="image", identifier=h,
                                          mm_position=PlaceholderRange(offset=0, length=1), mm_hash=h)
                    for d, h in zip(kwargs, hashes)]
        try:
            receiver.get_and_update_features(features)
        except MultiModalCacheMissError as e:  # the engine core lacks an item: the front end drops the keys
            missed.append(n)
            for key in e.mm_hashes:
                sender.invalidate(key)
    stats = sender.make_stats()
    sender.close()
    return {"gib": gib, "layout": layout, "hits": stats.hits, "lookups": stats.total, "failed": failed,
            "engine_core_missed": missed}

def max_tokens(mc, proc):
    # what the encoder budget takes as an image's most tokens (the model's own, else a dummy request's embeds)
    from vllm.multimodal import encoder_budget
    try:
        found = encoder_budget.get_mm_max_toks_per_item(proc, {"image": 1}, None)
    except TypeError:  # 0.30.0, 0.31.0: the config and the registry first
        found = encoder_budget.get_mm_max_toks_per_item(mc, MULTIMODAL_REGISTRY, proc, {"image": 1})
    return found["image"]

def shm_chunks(proc, placeholder, images):
    # each item's chunk in the shm sender's ring (its header, then what MsgpackSerde wrote)
    envs.VLLM_OBJECT_STORAGE_SHM_BUFFER_NAME = "mmpool_items_" + uuid.uuid4().hex[:12]
    sender = factories.processor_cache_from_config(config(0.5, "shm"))
    out = []
    try:
        for image in images:
            key = run_inputs(proc, placeholder, [image], sender).hashes["image"][0]
            store = sender._shm_cache
            with store.ring_buffer.access_buf(store.key_index[key][0]) as (_, md):
                out.append(md[1])
    finally:
        sender.close()
    return out

out = {"families": {}, "traffic": None}
for family in FAMILIES:
    path = os.path.join(ROOT_DIR, family)
    placeholder = BUILD[family](path)
    fam = out["families"][family] = {"runs": []}
    for norm in (None, True, False):
        mc = model_config(path, norm)
        proc = MULTIMODAL_REGISTRY.create_processor(mc)
        run = {"max_tokens_per_image": max_tokens(mc, proc),
               "mm_device_do_normalize": norm, "resolved": bool(mc.multimodal_config.mm_device_do_normalize),
               "model_dtype": str(mc.dtype).removeprefix("torch."), "items": []}
        for i, image in enumerate(IMAGES[: len(SIZES)]):
            result = run_inputs(proc, placeholder, [image], None)
            item = result.kwargs["image"][0]
            run["items"].append({"w": image.width, "h": image.height, "tensors": tensors(item),
                                 "item_size": MultiModalCache.get_item_size(item)})
        if SHM:
            for item, chunk in zip(run["items"], shm_chunks(proc, placeholder, IMAGES[: len(SIZES)])):
                item["ring_chunk_bytes"] = chunk
        if TRAFFIC and norm is not True:  # on gives the processing unset does where the class supports it
            run["traffic"] = [traffic(proc, lambda k: placeholder * k, gib) for gib in CACHE_GIB]
            if out["traffic"] is None:
                out["traffic"] = {"images": [{"w": im.width, "h": im.height} for im in IMAGES],
                                  "requests": REQUESTS}
        fam["runs"].append(run)
out["stand_ins"] = sorted(vllm_dump._StandInFinder.used)
json.dump(out, sys.stdout)
"""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--python", default=sys.executable)
    parser.add_argument("--deps", type=Path, required=True)
    parser.add_argument("--cache", type=Path, default=Path("/tmp/mmpool-vllm-wheels"))
    parser.add_argument("--versions", nargs="*", default=VERSIONS)
    parser.add_argument("--traffic", nargs="*", default=["0.34.0"], help="releases whose caches are driven")
    parser.add_argument("--extra-path", nargs="*", default=[], help="folders put on sys.path (torchvision's)")
    parser.add_argument("--families", nargs="*", default=["qwen2.5-vl", "gemma3"])
    parser.add_argument("--cache-gib", nargs="*", default=CACHE_GIB, help="the caches' sizes, GiB as vLLM reads them")
    parser.add_argument("--update", action="store_true", help="replace only the releases given in --out")
    parser.add_argument("--no-shm", action="store_true", help="skip the shm ring's chunks")
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args()
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import gen_vllm_tables

    releases = {}
    for version in args.versions:
        constants = {
            "FAMILIES": args.families,
            "TRAFFIC": version in args.traffic,
            "SHM": not args.no_shm,
            "CACHE_GIB": args.cache_gib,
            "EXTRA_PATH": [str(p) for p in args.extra_path],
            "DISTINCT": 36,
            "REQUEST_COUNT": 120,
        }
        print(f"vLLM {version} ...", file=sys.stderr)
        releases[version] = gen_vllm_tables.run_on_vllm(
            args.python, args.deps, args.cache, version, constants, CHILD, timeout=3600
        )
    if args.update and args.out.exists():  # keep the releases not run now
        releases = json.loads(args.out.read_text())["releases"] | releases
    releases = {v: releases[v] for v in sorted(releases, key=lambda v: tuple(map(int, v.split("."))))}
    data = {"generator": "scripts/record_vllm_item_fixtures.py", "releases": releases}
    args.out.write_text(json.dumps(data, separators=(",", ":")) + "\n")
    print(f"wrote {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
