"""Drive vLLM's own multimodal caches with generated traffic and record what they decide.

Maintainer-run only, like record_vllm_fixtures.py (same ``--deps`` folder and wheel cache). With
``PYTHONPATH`` on the unpacked vLLM wheel it builds, on CPU:

- the processor caches through vLLM's ``multimodal/cache/factories.py``
  (``processor_cache_from_config``, ``engine_receiver_cache_from_config``,
  ``worker_receiver_cache_from_config``): ``MultiModalProcessorOnlyCache`` (one per API process),
  the ``lru`` sender/receiver pair and the ``shm`` sender with its worker-side reader on a real
  ``/dev/shm`` ring. Each request goes through the processor's own ``_merge_mm_kwargs`` (is_cached,
  touch, get_and_update_item, release_sender_touches), and, for ``lru`` and ``shm``, the receiver's
  ``get_and_update_features``, as a request's items travel in vLLM;
- the items as the Qwen2.5-VL and Qwen3-VL processors hand them to the cache: a float32
  ``pixel_values`` of the image's patches and an int64 ``image_grid_thw``, made into
  ``MultiModalKwargsItem`` by vLLM's ``MultiModalKwargsItems.from_hf_inputs`` with the model's own
  field factory (``_create_qwen2vl_field_factory``, taken from the wheel's source by name: its module
  imports torchvision). The grid comes from transformers' ``smart_resize`` (source, by name) with the
  checkpoints' processor settings; pixel values are zeros (a cache looks at sizes, not values);
- ``EncoderCacheManager`` (``v1/core/encoder_cache_manager.py``) driven by mmpool's stated admission
  order (first come first served, at most ``window`` requests holding encoder entries; items that do
  not fit a step go in the next; a step that schedules nothing waits for the oldest request to finish):
  every call and what the manager answered.

Stand-ins: only the modules ``vllm_dump.STAND_INS`` lists that the interpreter lacks (compiled
kernels and server packages none of these classes use); ``torchvision`` is not imported at all.
Writes ``tests/data/vllm_cache_fixtures.json``.

Usage::

    python scripts/record_vllm_cache_fixtures.py --deps /tmp/vllm-deps [--version 0.34.0]
    python scripts/record_vllm_cache_fixtures.py --deps /tmp/vllm-deps --version 0.33.0 \
        --out tests/data/vllm_cache_fixtures_0.33.0.json
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "tests" / "data" / "vllm_cache_fixtures.json"

CHILD = r"""
import ast, json, logging, math, os, random, sys, typing, uuid
from types import SimpleNamespace as NS
sys.path.insert(0, SCRIPTS)
import vllm_dump
sys.meta_path.insert(0, vllm_dump._StandInFinder())
logging.disable(logging.CRITICAL)
import multiprocessing
import torch
from transformers import BatchFeature
import vllm.envs as envs
try:
    from vllm.multimodal.cache import factories
    from vllm.multimodal.cache.base import MultiModalCache, MultiModalCacheMissError
except ImportError:  # 0.30.0: one module, the factories are the registry's methods
    from vllm.multimodal import MULTIMODAL_REGISTRY as factories
    from vllm.multimodal.cache import MultiModalCache, MultiModalCacheMissError
    factories.supports_multimodal_inputs = lambda model_config: True  # the stand-in config's model is multimodal
from vllm.multimodal.inputs import (MultiModalFeatureSpec, MultiModalFieldConfig, MultiModalKwargsItems,
                                    PlaceholderRange)
from vllm.multimodal.processing.processor import BaseMultiModalProcessor
from vllm.v1.core.encoder_cache_manager import EncoderCacheManager

def function(path, name, ns):
    tree = ast.parse(open(path).read())
    node = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == name)
    exec(compile(ast.Module([node], []), path, "exec"), ns)
    return ns[name]

smart_resize = function(TRANSFORMERS + "/models/qwen2_vl/image_processing_qwen2_vl.py", "smart_resize", {"math": math})
field_factory = function(VLLM + "/vllm/model_executor/models/qwen2_vl.py", "_create_qwen2vl_field_factory",
                         {"torch": torch, "MultiModalFieldConfig": MultiModalFieldConfig,
                          "Callable": typing.Callable, "Mapping": typing.Mapping})
FAMILIES = {  # patch, merge, temporal patch, min and max pixels of the checkpoints' image processors
    "qwen2.5-vl": (14, 2, 2, 3136, 12845056),
    "qwen3-vl": (16, 2, 2, 65536, 16777216),
}

def make_item(family, w, h):
    patch, merge, temporal, lo, hi = FAMILIES[family]
    rh, rw = smart_resize(h, w, factor=patch * merge, min_pixels=lo, max_pixels=hi)
    grid = torch.tensor([[1, rh // patch, rw // patch]], dtype=torch.int64)
    pixels = torch.zeros((int(grid.prod()), 3 * temporal * patch * patch), dtype=torch.float32)
    hf = BatchFeature({"pixel_values": pixels, "image_grid_thw": grid})
    items = MultiModalKwargsItems.from_hf_inputs(hf, field_factory(merge)(hf))
    return items["image"][0], int(grid.prod()) // merge // merge

merge = BaseMultiModalProcessor._merge_mm_kwargs
proc_self = NS(_recompute_cached_prompt_update=lambda update, idx: update)

def config(kind, gb, api=1, dp=1):
    mm = NS(mm_processor_cache_gb=gb, mm_processor_cache_type=kind, mm_shm_cache_max_object_size_mb=MAX_OBJECT_MB)
    model = NS(supports_multimodal_inputs=True, get_multimodal_config=lambda: mm)
    par = NS(_api_process_count=api, data_parallel_size=dp, data_parallel_external_lb=False, world_size=1)
    return NS(model_config=model, parallel_config=par)

def run_processor(kind, capacity, requests, items, api):
    gb = capacity / 2**30  # exact: capacity < 2**53
    envs.VLLM_OBJECT_STORAGE_SHM_BUFFER_NAME = "mmpool_fixture_" + uuid.uuid4().hex[:12]
    cfg = config(kind, gb, api=api, dp=api)
    layout = factories._get_cache_type(cfg)
    senders = [factories.processor_cache_from_config(cfg) for _ in range(api)]
    receiver = factories.engine_receiver_cache_from_config(cfg)
    lock = multiprocessing.Lock()
    worker = factories.worker_receiver_cache_from_config(cfg, lock)
    flags, errors, sizes = [], [], {}
    try:
        for n, keys in enumerate(requests):
            cache = senders[n % api]  # requests dealt round robin over the API processes
            hashes = {"image": list(keys)}
            is_cached = {"image": cache.is_cached(hashes["image"])}
            missing = [(items[k], []) for k, c in zip(keys, is_cached["image"]) if not c]
            missing_kwargs = {"image": [m[0] for m in missing]}
            missing_updates = {"image": [m[1] for m in missing]}
            try:
                try:
                    kwargs, _ = merge(proc_self, cache, hashes, is_cached, missing_kwargs, missing_updates)
                finally:
                    getattr(cache, "release_sender_touches", lambda: None)()  # 0.32.0 and later
            except AssertionError as e:
                flags.append("".join("H" if c else "M" for c in is_cached["image"]))
                errors.append({"request": n, "where": "sender", "error": "AssertionError"})
                continue
            flags.append("".join("H" if c else "M" for c in is_cached["image"]))
            features = [MultiModalFeatureSpec(data=d, modality="image", identifier=k,
                                              mm_position=PlaceholderRange(offset=0, length=1), mm_hash=k)
                        for d, k in zip(kwargs["image"], keys)]
            for target, name in ((receiver, "engine core"), (worker, "worker")):
                if target is None:
                    continue
                try:
                    target.get_and_update_features(features)
                except MultiModalCacheMissError as e:
                    errors.append({"request": n, "where": name, "error": "MultiModalCacheMissError",
                                   "keys": e.mm_hashes})
                    for key in e.mm_hashes:  # what the front end does with the engine's answer
                        cache.invalidate(key)
            if kind == "shm" and layout == "shm":
                store = cache._shm_cache
                for k in keys:
                    if k in store.key_index and k not in sizes:
                        with store.ring_buffer.access_buf(store.key_index[k][0]) as (_, md):
                            sizes[k] = md[1]
        stats = [c.make_stats() for c in senders]
    finally:
        for c in senders:
            c.close()
    row = {"layout": layout, "capacity": capacity, "flags": flags, "errors": errors,
           "hits": [s.hits for s in stats], "total": [s.total for s in stats]}
    if sizes:
        row["ring_chunk_bytes"] = sizes
    return row

def sequences(rng, keys):
    chat = []
    convs = [[] for _ in range(5)]
    order = [c for c in range(5) for _ in range(4)]
    rng.shuffle(order)
    for c in order:
        convs[c].append(rng.choice(keys))
        chat.append(list(convs[c]))
    popular = []
    for _ in range(40):
        k = rng.choice([1, 1, 1, 2, 3])
        popular.append([keys[min(int(rng.paretovariate(1.2)) - 1, len(keys) - 1)] for _ in range(k)])
    return {"chat": chat, "popular": popular}

out = {"families": {}, "processor": [], "encoder": []}
rng = random.Random(34)
SIZES = [(224, 224), (448, 336), (640, 480), (800, 600), (1024, 768), (28, 28), (1280, 720), (300, 1000), (1920, 1080)]
for family in FAMILIES:
    items, tokens, bytes_ = {}, {}, {}
    for i, (w, h) in enumerate(SIZES):
        key = f"{family}:{w}x{h}"
        items[key], tokens[key] = make_item(family, w, h)
        bytes_[key] = MultiModalCache.get_item_size(items[key])
    out["families"][family] = {"items": {k: {"w": w, "h": h, "tokens": tokens[k], "item_size": bytes_[k]}
                                         for k, (w, h) in zip(items, SIZES)}}
    keys = list(items)
    seqs = sequences(rng, keys[:-1])
    seqs["large"] = [[keys[0]], [keys[-1]], [keys[0]], [keys[1], keys[-1], keys[0]], [keys[-1]], [keys[0]],
                     [keys[2], keys[2], keys[3]], [keys[3], keys[2]]]
    total = sum(bytes_.values())
    small = sorted(bytes_.values())
    caps = sorted({small[0] - 1, small[0], small[0] + small[1], small[2] * 3, total // 4, total // 2,
                   bytes_[keys[-1]] - 1, bytes_[keys[-1]], bytes_[keys[-1]] + small[0], total, 4 * total})
    for name, reqs in seqs.items():
        for kind, api in (("lru", 1), ("shm", 1), ("lru", 2)):
            for cap in caps:
                row = run_processor(kind, cap, reqs, items, api)
                out["processor"].append({"family": family, "sequence": name, "type": kind, "api": api, **row})
    out["families"][family]["sequences"] = seqs

def run_encoder(budget, window, requests, tokens):
    m = EncoderCacheManager(cache_size=budget)
    log, inflight = [], []
    def finish():
        req = inflight.pop(0)
        m.free(req)
        log.append(["free", req.request_id, m.num_free_slots, m.num_freeable_slots])
    for n, keys in enumerate(requests):
        feats = [NS(identifier=k) for k in keys]
        req = NS(request_id=f"r{n}", mm_features=feats,
                 get_num_encoder_embeds=lambda i, f=feats: tokens[f[i].identifier])
        if len(inflight) >= window:
            finish()
        start = 0
        while True:
            compute, scheduled, seen, to_alloc, dup = budget, 0, {}, [], []
            failed = None
            for i in range(start, len(keys)):
                k = keys[i]
                if k in seen:
                    dup.append(i); continue
                if m.check_and_update_cache(req, i):
                    log.append(["hit", req.request_id, i]); continue
                if not m.can_allocate(req, i, compute, scheduled):
                    failed = i; break
                n_ = tokens[k]; scheduled += n_; compute -= n_; seen[k] = n_; to_alloc.append(i)
            for i in to_alloc:
                m.allocate(req, i)
                log.append(["alloc", req.request_id, i])
            for i in dup:
                m.check_and_update_cache(req, i)
                log.append(["dup", req.request_id, i])
            log.append(["freed", sorted(m.get_freed_mm_hashes())])
            if failed is None:
                break
            if failed > start:
                log.append(["step", req.request_id, failed])
                start = failed
                continue
            if not inflight:
                log.append(["refuse", req.request_id, failed])
                break
            log.append(["wait", req.request_id, failed])
            finish()
        inflight.append(req)
    return log

for family, data in out["families"].items():
    tokens = {k: v["tokens"] for k, v in data["items"].items()}
    for name, reqs in data["sequences"].items():
        biggest = max(tokens.values())
        for budget in sorted({biggest, 2 * biggest, 3000, 8192, 16384, sum(tokens.values())}):
            for window in (1, 2, 4):
                out["encoder"].append({"family": family, "sequence": name, "budget": budget, "window": window,
                                       "log": run_encoder(budget, window, reqs, tokens)})
out["stand_ins"] = sorted(vllm_dump._StandInFinder.used)
json.dump(out, sys.stdout)
"""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--python", default=sys.executable)
    parser.add_argument("--deps", type=Path, required=True)
    parser.add_argument("--cache", type=Path, default=Path("/tmp/mmpool-vllm-wheels"))
    parser.add_argument("--version", default="0.34.0")
    parser.add_argument("--out", type=Path, default=OUT, help="where to write (another release's, to compare)")
    args = parser.parse_args()
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import gen_vllm_tables

    found = gen_vllm_tables.run_on_vllm(
        args.python, args.deps, args.cache, args.version, {"MAX_OBJECT_MB": 128}, CHILD, timeout=1800
    )
    data = {"generator": "scripts/record_vllm_cache_fixtures.py", "vllm": args.version, **found}
    args.out.write_text(json.dumps(data, separators=(",", ":")) + "\n")
    print(f"wrote {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
