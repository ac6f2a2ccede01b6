"""Make tests/data/sglang_caches.json: SGLang 0.5.23's own multimodal caches, driven by its own code.

    pip download --no-deps sglang==0.5.23 -d /tmp/caches-wheels && cd /tmp/caches-wheels && unzip -q sglang-*.whl -d sg
    python scripts/sglang_cache_fixtures.py /tmp/caches-wheels/sg

Runs with CPU torch. What it takes from the wheel, unchanged:

* ``mem_cache/multimodal_cache.py`` (``MultiModalStaticCache``, ``EmbeddingResult``), imported as a
  module; its one import that needs the rest of SGLang, ``mem_cache/allocator.py``
  (``BaseTokenToKVPoolAllocator``, a type annotation only), is stubbed;
* ``multimodal/cache/preprocess_cache.py`` (``MultimodalPreprocessCache``,
  ``estimate_cache_size_bytes``), imported as a module (numpy, torch, PIL);
* from ``managers/mm_schedule.py``, the scheduler's per-item call sequence
  (``_batch_encode_per_image_misses``, ``PerImageRequestInfo``, ``_item_overlap``,
  ``_embedding_token_count``, ``_discard_mismatched_cached_embedding``) and the per-request one
  (``_get_chunked_embedding_full``), executed from the wheel's source: the module itself imports
  the whole scheduler (orjson, triton, ...), which does not import on CPU. Stubbed around them:
  ``_move_items_to_device`` (a device move: nothing on CPU), ``logger``, ``MultimodalDataItem``
  (``hash``, ``offsets``, ``model_specific_data``, no deferred CUDA IPC), ``EVSEmbeddingResult``
  (a class no item here produces);
* from ``multimodal/processors/qwen_vl.py``, ``QwenVLImagePreprocessArtifact``, executed from the
  wheel's source (the module imports the processor stack); artifacts are built as
  ``_prepare_image_artifacts`` builds them (one float32 ``pixel_values`` batch of the request's
  misses, sliced per image with ``.contiguous()``, ``image_grid_thw`` rows).

The preprocess cache's call sequence (``media_artifacts/base.py`` ``prepare_media_artifacts``:
``get_if_present`` per image, the misses deduplicated and popped, ``lookup_or_claim_many``, then
``complete_miss`` per miss in order) is async and needs the processor; it is followed here step
by step with the real class, one request at a time. Each scenario is replayed at every size the
test checks; the JSON holds the items and the hits (and the embedding cache's lookups, the
preprocess cache's own counters).
"""

from __future__ import annotations

import ast
import importlib.util
import json
import random
import sys
import types
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Optional

OUT = Path(__file__).resolve().parent.parent / "tests" / "data" / "sglang_caches.json"
PATCH_DIM = {"qwen2.5-vl": 3 * 2 * 14 * 14, "qwen3-vl": 3 * 2 * 16 * 16}
MERGE = 2


def load_module(name: str, path: Path) -> types.ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def extract(path: Path, names: set[str], namespace: dict[str, Any]) -> None:
    """Execute the top-level definitions ``names`` of the wheel's ``path`` in ``namespace``."""
    tree = ast.parse(path.read_text())
    body = [n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.ClassDef)) and n.name in names]
    missing = names - {n.name for n in body}
    assert not missing, f"{path}: no {sorted(missing)} in this release"
    exec(compile(ast.Module(body=body, type_ignores=[]), str(path), "exec"), namespace)


@dataclass
class Item:  # what mm_schedule reads of a MultimodalDataItem
    hash: int
    offsets: list[tuple[int, int]]
    model_specific_data: dict[str, Any] = field(default_factory=dict)

    def can_defer_cuda_ipc_feature_reconstruction(self) -> bool:
        return False

    def is_audio(self) -> bool:
        return False


class Wheel:
    def __init__(self, root: Path) -> None:
        import torch

        srt = root / "sglang" / "srt"
        allocator = types.ModuleType("sglang.srt.mem_cache.allocator")
        allocator.BaseTokenToKVPoolAllocator = object  # type: ignore[attr-defined]
        for pkg in (
            "sglang",
            "sglang.srt",
            "sglang.srt.mem_cache",
            "sglang.srt.multimodal",
            "sglang.srt.multimodal.cache",
        ):
            sys.modules.setdefault(pkg, types.ModuleType(pkg))
        sys.modules["sglang.srt.mem_cache.allocator"] = allocator
        self.mm = load_module("sglang.srt.mem_cache.multimodal_cache", srt / "mem_cache" / "multimodal_cache.py")
        self.pre = load_module(
            "sglang.srt.multimodal.cache.preprocess_cache", srt / "multimodal" / "cache" / "preprocess_cache.py"
        )
        import logging

        ns: dict[str, Any] = {
            "torch": torch,
            "Optional": Optional,
            "Any": Any,
            "List": list,
            "Dict": dict,
            "Tuple": tuple,
            "Callable": Any,
            "dataclass": dataclass,
            "field": field,
            "replace": replace,
            "EmbeddingResult": self.mm.EmbeddingResult,
            "MultiModalStaticCache": self.mm.MultiModalStaticCache,
            "MultimodalDataItem": Item,
            "EVSEmbeddingResult": type("EVSEmbeddingResult", (), {}),
            "BORROW_CUDA_IPC_FEATURE_KEY": "borrow",
            "logger": logging.getLogger("sglang"),
            "DataEmbeddingFunc": Any,
            "_move_items_to_device": lambda items, device, func: None,
        }
        extract(
            srt / "managers" / "mm_schedule.py",
            {
                "PerImageRequestInfo",
                "_item_overlap",
                "_embedding_token_count",
                "_discard_mismatched_cached_embedding",
                "_batch_encode_per_image_misses",
                "_get_chunked_embedding_full",
                "_flatten_embedding_result",
                "get_embedding_chunk",
            },
            ns,
        )
        self.sched = ns
        art: dict[str, Any] = {
            "dataclass": dataclass,
            "replace": replace,
            "Optional": Optional,
            "Any": Any,
            "torch": torch,
        }
        extract(srt / "multimodal" / "processors" / "qwen_vl.py", {"QwenVLImagePreprocessArtifact"}, art)
        self.Artifact = art["QwenVLImagePreprocessArtifact"]


def embedding_hits(
    w: Wheel, requests: list[list[dict[str, Any]]], family: str, width: int, size: int
) -> tuple[int, int]:
    """Replay the requests through MultiModalStaticCache(size) with mm_schedule's own functions; count the
    hits and the lookups (every get_single and get before the batch's misses are encoded: an item a
    request holds twice is looked up again where its first lookup missed)."""
    import torch

    cache = w.mm.MultiModalStaticCache(size)
    w.sched["embedding_cache"] = cache
    hits = looked = 0
    real_get_single, real_get = cache.get_single, cache.get

    def get_single(h: int) -> Any:
        nonlocal hits, looked
        got = real_get_single(h)
        hits += got is not None and lookup_phase[0]
        looked += lookup_phase[0]
        return got

    def get(hashes: list[int], combined_hash: Any = None) -> Any:
        nonlocal hits, looked
        got = real_get(hashes, combined_hash)
        hits += got is not None
        looked += 1
        return got

    cache.get_single, cache.get = get_single, get
    lookup_phase = [True]
    for req in requests:
        for kind in ("image", "video"):
            mine = [it for it in req if (it["kind"] == "video") == (kind == "video")]
            if not mine:
                continue
            items, pos = [], 0
            for it in mine:
                runs = 2 if kind == "video" and family == "qwen3-vl" else 1  # frames split by their timestamps
                per, offs = it["tokens"] // runs, []
                for r in range(runs):
                    n = per if r < runs - 1 else it["tokens"] - per * (runs - 1)
                    offs.append((pos, pos + n - 1))
                    pos += n + 1
                items.append(Item(hash=it["hash"], offsets=offs))

            def encode(batch: list[Item]) -> torch.Tensor:  # the ViT: one row per token, the model's width
                lookup_phase[0] = False
                return torch.zeros(
                    sum(sum(e - s + 1 for s, e in i.offsets) for i in batch), width, dtype=torch.bfloat16
                )

            lookup_phase[0] = True
            if all(len(i.offsets) == 1 for i in items):
                info = w.sched["PerImageRequestInfo"](0, items, [o for i in items for o in i.offsets], 0, pos)
                w.sched["_batch_encode_per_image_misses"](encode, [info], "cpu")
            else:
                ids = torch.zeros(pos, dtype=torch.long)
                w.sched["_get_chunked_embedding_full"](
                    encode, items, [o for i in items for o in i.offsets], 0, pos, ids, "cpu"
                )
    return hits, looked


def preprocess_run(w: Wheel, requests: list[list[dict[str, Any]]], family: str, size: int) -> dict[str, int]:
    """Replay the image-only requests through MultimodalPreprocessCache(size) as prepare_media_artifacts does."""
    import torch

    cache = w.pre.MultimodalPreprocessCache(max_size_bytes=size, max_entries=8192)
    for req in requests:
        if any(it["kind"] == "video" for it in req) or not cache.enabled:
            continue  # qwen_vl.py process_mm_data_async: the uncached path
        keys = [artifact_key(it) for it in req]
        found = [cache.get_if_present(k, lambda a, k=k: a.artifact_key == k, evict_on_reject=True) for k in keys]
        first: dict[str, dict[str, Any]] = {}
        for it, k, got in zip(req, keys, found, strict=True):
            if got is None and k not in first:
                first[k] = it
                cache.pop(k)
        results = cache.lookup_or_claim_many(list(first))
        misses = [r for r in results if isinstance(r, w.pre.CacheMiss) and r.should_compute]
        if not misses:
            continue
        batch = [first[m.key] for m in misses]  # one processor call for the request's misses
        rows = [it["tokens"] * MERGE * MERGE for it in batch]
        features = torch.empty(sum(rows), PATCH_DIM[family], dtype=torch.float32)
        grid = torch.tensor([[1, 2 * r // 4, 2] for r in rows], dtype=torch.long)
        at = 0
        for miss, it, n, g in zip(misses, batch, rows, grid, strict=True):
            artifact = w.Artifact(
                content_digest="sha256:" + "0" * 64,
                artifact_key=miss.key,
                feature_hash=(1 << 63) | it["hash"],
                feature=features[at : at + n].contiguous(),
                model_specific_data={"image_grid_thw": g.unsqueeze(0)},
            )
            at += n
            cache.complete_miss(miss, artifact, cache_value=artifact.cache_value())
    stats = cache.stats()
    return {"hits": stats["hits"], "misses": stats["misses"]}


def artifact_key(it: dict[str, Any]) -> str:
    return "sha256:" + it["key"].rjust(64, "0")


def scenario(name: str, family: str, requests: list[list[dict[str, Any]]]) -> dict[str, Any]:
    return {"name": name, "family": family, "requests": requests}


def image(key: str, tokens: int, kind: str = "image") -> dict[str, Any]:
    return {"key": key, "tokens": tokens, "kind": kind, "hash": int(key, 16) & ((1 << 62) - 1)}


def scenarios(rng: random.Random) -> list[dict[str, Any]]:
    out = []
    for family in ("qwen2.5-vl", "qwen3-vl"):
        pool = [image(f"{i + 1:x}", rng.randint(4, 60)) for i in range(30)]
        # multi-turn chats: each turn re-sends every earlier image and adds one; chats interleaved
        chats = [[pool[3 * c + t] for t in range(3)] for c in range(6)]
        turns: list[list[dict[str, Any]]] = []
        for t in range(3):
            for c in chats:
                turns.append(c[: t + 1])
        out.append(scenario(f"{family} multi-turn chats", family, turns))
        # multi-image requests drawing from a small set, with repeats inside a request too
        multi = [[rng.choice(pool[:10]) for _ in range(rng.randint(2, 4))] for _ in range(40)]
        out.append(scenario(f"{family} multi-image requests", family, multi))
        # a video among images, and one image larger than most caches
        video = image("fa11", 400, "video")
        big = image("b16", 300)
        mixed = [[pool[0]], [video], [pool[1], pool[0]], [big], [pool[0]], [video, pool[2]], [big], [pool[1]]]
        out.append(scenario(f"{family} a video and an item larger than the cache", family, mixed * 3))
    return out


def streaming(rng: random.Random) -> list[dict[str, Any]]:
    """Traffic one pass is exact for: single-image requests that repeat a few popular images, and
    multi-image requests of images never seen again; an item larger than most caches among them."""
    out = []
    for family in ("qwen2.5-vl", "qwen3-vl"):
        popular = [image(f"c{i:x}", rng.randint(4, 60)) for i in range(6)]
        big = image("cb16", 300)
        fresh = iter(image(f"d{i:x}", rng.randint(4, 60)) for i in range(1000))
        reqs: list[list[dict[str, Any]]] = []
        for _ in range(30):
            r = rng.random()
            if r < 0.55:
                reqs.append([rng.choice(popular)])
            elif r < 0.65:
                reqs.append([big])
            elif r < 0.8:
                reqs.append([next(fresh)])
            else:
                reqs.append([next(fresh) for _ in range(rng.randint(2, 3))])
        out.append(scenario(f"{family} streaming: repeated single images, new multi-image requests", family, reqs))
    return out


def main() -> None:
    root = Path(sys.argv[1] if len(sys.argv) > 1 else "/tmp/caches-wheels/sg")
    w = Wheel(root)
    rng = random.Random(20261206)
    data = []
    for sc in scenarios(rng) + streaming(random.Random(20261207)):
        family, reqs = sc["family"], sc["requests"]
        hidden = 2
        width = hidden * (4 if family == "qwen3-vl" else 1)
        unit = width * 2
        total = sum(it["tokens"] for r in reqs for it in r) * unit
        sizes = sorted({s for k in range(total // unit + 2) for s in (k * unit, max(0, k * unit - 1))})
        emb = [embedding_hits(w, reqs, family, width, s) for s in sizes]
        entry = sum(it["tokens"] * MERGE * MERGE * PATCH_DIM[family] * 4 for r in reqs for it in r)
        grid = sorted({0, 1} | {entry * k // 60 for k in range(61)} | {rng.randint(0, entry // 3) for _ in range(60)})
        pre = [preprocess_run(w, reqs, family, s) for s in grid]
        data.append(
            {
                **sc,
                "hidden_size": hidden,
                "embedding": {"sizes": sizes, "hits": [h for h, _ in emb], "lookups": [n for _, n in emb]},
                "preprocess": {"sizes": grid, "hits": [p["hits"] for p in pre], "misses": [p["misses"] for p in pre]},
            }
        )
        print(f"{sc['name']}: {len(sizes)} embedding sizes, {len(grid)} preprocess sizes", file=sys.stderr)
    OUT.write_text(json.dumps({"sglang": "0.5.23", "scenarios": data}, indent=1) + "\n")


if __name__ == "__main__":
    main()
