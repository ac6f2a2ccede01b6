"""A program that drives vLLM's own multimodal caches on the CPU as vLLM calls them; it prints what they counted.

    python vllm_cache_program.py SCRIPTS_DIR CACHE_TYPE CAPACITY_BYTES ENCODER_TOKENS

vLLM's modules come from ``PYTHONPATH`` (an unpacked wheel and its dependencies); the compiled
kernels and server packages none of these classes use are stood in for by ``scripts/vllm_dump.py``.
The processor cache is built by vLLM's ``factories.py`` from a stand-in config (``CACHE_TYPE`` lru,
shm, or processor_only: two API processes, the second spawned as vLLM spawns its API servers). Each
request goes through the sender as the processor drives it: ``is_cached`` of its hashes, then the
processor's own ``_merge_mm_kwargs`` (the touches, ``get_and_update_item`` item by item), then
``release_sender_touches``; for ``lru``, the engine core's receiver too, and ``invalidate`` of what it
lacked. The encoder cache is vLLM's ``EncoderCacheManager``, asked as the scheduler asks it. Items
are ``MultiModalKwargsItem``s of a float32 tensor whose rows are the item's patches (a cache looks at
sizes, not values); the traffic is seeded: multi-turn chats that repeat images, a popular few, and
an image larger than the cache.
"""

from __future__ import annotations

import importlib
import json
import logging
import multiprocessing
import random
import sys
import uuid
from types import SimpleNamespace as NS
from typing import Any

V = NS()  # vLLM's classes and torch, once ``setup`` has imported them


def setup(scripts: str) -> None:
    """Import vLLM's classes (here, not at import: the suite's doctests import every module it has)."""
    sys.path.insert(0, scripts)
    sys.meta_path.insert(0, importlib.import_module("vllm_dump")._StandInFinder())
    logging.disable(logging.CRITICAL)
    V.torch = importlib.import_module("torch")
    V.envs = importlib.import_module("vllm.envs")
    try:
        V.factories = importlib.import_module("vllm.multimodal.cache.factories")
        V.MissError = importlib.import_module("vllm.multimodal.cache.base").MultiModalCacheMissError
    except ImportError:  # 0.30.0: one module, the factories are the registry's methods
        V.factories = importlib.import_module("vllm.multimodal").MULTIMODAL_REGISTRY
        V.factories.supports_multimodal_inputs = lambda model_config: True  # the stand-in config's model is multimodal
        V.MissError = importlib.import_module("vllm.multimodal.cache").MultiModalCacheMissError
    V.inputs = importlib.import_module("vllm.multimodal.inputs")
    V.merge = importlib.import_module("vllm.multimodal.processing.processor").BaseMultiModalProcessor._merge_mm_kwargs
    V.EncoderCacheManager = importlib.import_module("vllm.v1.core.encoder_cache_manager").EncoderCacheManager


ROW = 1176  # float32 elements of a patch: 3 x 2 x 14 x 14 (Qwen2.5-VL)
proc_self = NS(_recompute_cached_prompt_update=lambda update, idx: update)


def item(rows: int) -> Any:
    """A ``MultiModalKwargsItem`` of ``rows`` patches."""
    data = V.torch.zeros((rows, ROW), dtype=V.torch.float32)
    elem = V.inputs.MultiModalFieldElem(data=data, field=V.inputs.MultiModalBatchedField())
    return V.inputs.MultiModalKwargsItem({"pixel_values": elem})


def config(kind: str, capacity: int, api: int) -> NS:
    kind = "lru" if kind == "processor_only" else kind  # two API processes make it processor_only
    mm = NS(mm_processor_cache_gb=capacity / 2**30, mm_processor_cache_type=kind, mm_shm_cache_max_object_size_mb=128)
    model = NS(supports_multimodal_inputs=True, get_multimodal_config=lambda: mm)
    par = NS(_api_process_count=api, data_parallel_size=api, data_parallel_external_lb=False, world_size=1)
    return NS(model_config=model, parallel_config=par)


def traffic(seed: int) -> tuple[list[list[str]], dict[str, int]]:
    """Requests (their items' hashes) and each item's patches."""
    rng = random.Random(seed)
    rows = {f"img{i:02d}": rng.randrange(64, 1600) for i in range(24)}
    rows["huge"] = 40000  # larger than the cache
    keys = sorted(rows)
    requests: list[list[str]] = []
    chats: list[list[str]] = [[] for _ in range(6)]
    for _ in range(60):
        if rng.random() < 0.5:
            chat = chats[rng.randrange(6)]
            chat.append(rng.choice(keys[:-1]))
            requests.append(list(chat[-4:]))  # a chat resends its latest images
        else:
            requests.append(
                [keys[min(int(rng.paretovariate(1.1)) - 1, len(keys) - 2)] for _ in range(rng.randrange(1, 3))]
            )
    requests[20:20] = [["huge"], [keys[0], "huge"]]
    return requests, rows


def drive(kind: str, capacity: int, api: int, part: int) -> dict[str, int]:
    """Send every ``api``-th request (from ``part``) through one sender; vLLM's own counts."""
    if kind == "shm":
        V.envs.VLLM_OBJECT_STORAGE_SHM_BUFFER_NAME = "mmpool_test_" + uuid.uuid4().hex[:12]
    cfg = config(kind, capacity, api)
    cache = V.factories.processor_cache_from_config(cfg)
    receiver = V.factories.engine_receiver_cache_from_config(cfg)
    worker = V.factories.worker_receiver_cache_from_config(cfg, multiprocessing.Lock())
    requests, rows = traffic(7)
    items = {k: item(n) for k, n in rows.items()}
    failed = 0
    try:
        for keys in requests[part::api]:
            hashes = {"image": list(keys)}
            is_cached = {"image": cache.is_cached(keys)}
            missing = [items[k] for k, c in zip(keys, is_cached["image"], strict=True) if not c]
            try:
                try:
                    kwargs, _ = V.merge(
                        proc_self, cache, hashes, is_cached, {"image": missing}, {"image": [[] for _ in missing]}
                    )
                finally:
                    getattr(cache, "release_sender_touches", lambda: None)()  # 0.32.0 and later
            except AssertionError:  # vLLM fails a request whose cached item its own inserts evicted
                failed += 1
                continue
            features = [
                V.inputs.MultiModalFeatureSpec(
                    data=d,
                    modality="image",
                    identifier=k,
                    mm_position=V.inputs.PlaceholderRange(offset=0, length=1),
                    mm_hash=k,
                )
                for d, k in zip(kwargs["image"], keys, strict=True)
            ]
            for target in (receiver, worker):
                if target is None:
                    continue
                try:
                    target.get_and_update_features(features)
                except V.MissError as e:
                    for key in e.mm_hashes:  # what the front end does with the engine's answer
                        cache.invalidate(key)
        stats = cache.make_stats()
    finally:
        cache.close()
    return {"hits": stats.hits, "total": stats.total, "failed": failed}


def encoder(budget: int) -> dict[str, int]:
    """The scheduler's calls of ``EncoderCacheManager``: two requests in flight, items admitted in order."""
    requests, rows = traffic(7)
    tokens = {k: n // 4 for k, n in rows.items()}  # 2 x 2 patches merge into one token
    manager = V.EncoderCacheManager(cache_size=budget)
    inflight: list[NS] = []
    counts = {"lookups": 0, "hits": 0, "waits": 0, "allocated": 0, "peak": 0}
    for n, keys in enumerate(requests):
        feats = [NS(identifier=k) for k in keys]
        req = NS(
            request_id=f"r{n}", mm_features=feats, get_num_encoder_embeds=lambda i, f=feats: tokens[f[i].identifier]
        )
        if len(inflight) >= 2:
            manager.free(inflight.pop(0))
        for i in range(len(keys)):
            counts["lookups"] += 1
            if manager.check_and_update_cache(req, i):
                counts["hits"] += 1
                continue
            while not manager.can_allocate(req, i, budget, 0):
                counts["waits"] += 1
                if not inflight:
                    break
                manager.free(inflight.pop(0))
            else:
                manager.allocate(req, i)
                counts["allocated"] += 1
                counts["peak"] = max(counts["peak"], budget - manager.num_free_slots)
        inflight.append(req)
    return counts


def second(scripts: str, kind: str, capacity: int, queue: Any) -> None:
    """The second API process's sender (spawned: a fresh interpreter, as vLLM's API servers are)."""
    setup(scripts)
    queue.put(drive(kind, capacity, 2, 1))


if __name__ == "__main__":
    kind, capacity, budget = sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    setup(sys.argv[1])
    out: dict[str, object] = {}
    if kind == "processor_only":  # two API processes: the second spawned, as vLLM starts its API servers
        ctx = multiprocessing.get_context("spawn")
        queue = ctx.Queue()
        child = ctx.Process(target=second, args=(sys.argv[1], kind, capacity, queue))
        child.start()
        out["senders"] = [drive(kind, capacity, 2, 0), queue.get(timeout=300)]
        child.join(300)
    else:
        out["senders"] = [drive(kind, capacity, 1, 0)]
    out["encoder"] = encoder(budget)
    print(json.dumps(out))
