"""A small stand-in for vLLM's processor-cache senders and encoder cache, for the hook's mechanics (not vLLM's code).

``tree(dir)`` writes a package ``vllm`` with the classes and attributes the hook reads: a byte-counted
LRU with cachetools' attributes (``maxsize``, ``currsize``, each entry's size in ``_Cache__size``),
``MultiModalProcessorOnlyCache`` and ``LruKeyReplicatedSenderCache`` on it, and an
``EncoderCacheManager`` with vLLM's slots and lazy freeing. Their digests are not in mmpool's
``digests.json``: ``digests(dir)`` writes the extra file (``MMPOOL_RECORD_DIGESTS``) that makes them
known. ``PROGRAM`` drives them as vLLM's processor and scheduler do and prints what they counted; CI,
which has no vLLM, runs the hook's vLLM path with it (``test_vllm_caches`` runs vLLM's own classes).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
RECORD_DIR = ROOT / "mmpool_cli" / "_record"

BASE = """
from collections import OrderedDict


class Cache:
    def __init__(self, maxsize):
        self.maxsize, self.currsize = maxsize, 0
        self.__size = {}
        self.order = OrderedDict()
        self.hits = self.total = 0

    def __contains__(self, key):
        return key in self.order

    def __len__(self):
        return len(self.order)

    def get(self, key):
        self.total += 1
        if key in self.order:
            self.hits += 1
            self.order.move_to_end(key)
            return self.order[key]
        return None

    def touch(self, key):
        if key in self.order:
            self.order.move_to_end(key)

    def put_if_fits(self, key, value, size):
        if size > self.maxsize:
            return False
        while self.currsize + size > self.maxsize:
            old, _ = self.order.popitem(last=False)
            self.currsize -= self.__size.pop(old)
        self.order[key], self.__size[key] = value, size
        self.currsize += size
        return True

    def pop(self, key):
        if key in self.order:
            del self.order[key]
            self.currsize -= self.__size.pop(key)


class BaseMultiModalCache:
    def cache_if_fits(self, cache, key, value):
        return cache.put_if_fits(key, value, value)


class BaseMultiModalProcessorCache(BaseMultiModalCache):
    def is_cached(self, mm_hashes):
        return [self.is_cached_item(mm_hash) for mm_hash in mm_hashes]


class MultiModalProcessorOnlyCache(BaseMultiModalProcessorCache):
    def __init__(self, capacity):
        self._cache = Cache(capacity)

    def is_cached_item(self, mm_hash):
        return mm_hash in self._cache

    def get_and_update_item(self, mm_item, mm_hash):
        if self._cache.get(mm_hash) is not None:
            return None
        assert mm_item is not None
        self.cache_if_fits(self._cache, mm_hash, mm_item)
        return mm_item

    def touch_sender_cache_item(self, mm_hash):
        self._cache.touch(mm_hash)

    def clear_cache(self):
        self._cache = Cache(self._cache.maxsize)
"""

LRU = """
from vllm.multimodal.cache.base import BaseMultiModalProcessorCache, Cache


class LruKeyReplicatedSenderCache(BaseMultiModalProcessorCache):
    def __init__(self, capacity):
        self._cache = Cache(capacity)

    def is_cached_item(self, mm_hash):
        return mm_hash in self._cache

    def get_and_update_item(self, mm_item, mm_hash):
        if self._cache.get(mm_hash) is not None:
            return None
        assert mm_item is not None
        self.cache_if_fits(self._cache, mm_hash, mm_item)
        return mm_item

    def touch_sender_cache_item(self, mm_hash):
        self._cache.touch(mm_hash)

    def clear_cache(self):
        self._cache = Cache(self._cache.maxsize)

    def invalidate(self, mm_hash):
        self._cache.pop(mm_hash)
"""

ENCODER = """
from collections import OrderedDict


class EncoderCacheManager:
    def __init__(self, cache_size):
        self.cache_size = self.num_free_slots = self.num_freeable_slots = cache_size
        self.cached, self.freeable, self.tokens = {}, OrderedDict(), {}

    def reset(self):
        self.__init__(self.cache_size)

    def check_and_update_cache(self, request, input_id):
        key = request.mm_features[input_id].identifier
        if key not in self.cached:
            return False
        if not self.cached[key]:
            self.num_freeable_slots -= self.freeable.pop(key)
        self.cached[key].add(request.request_id)
        return True

    def can_allocate(self, request, input_id, encoder_compute_budget, num_embeds_to_schedule):
        n = request.get_num_encoder_embeds(input_id) + num_embeds_to_schedule
        if n <= self.num_free_slots:
            return True
        if n > self.num_freeable_slots:
            return False
        while n > self.num_free_slots:
            key, tokens = self.freeable.popitem(last=False)
            del self.cached[key]
            self.num_free_slots += tokens
        return True

    def allocate(self, request, input_id):
        key = request.mm_features[input_id].identifier
        n = request.get_num_encoder_embeds(input_id)
        self.cached.setdefault(key, set()).add(request.request_id)
        self.tokens[key] = n
        self.num_free_slots -= n
        self.num_freeable_slots -= n

    def free_encoder_input(self, request, input_id):
        key = request.mm_features[input_id].identifier
        refs = self.cached.get(key)
        if not refs or request.request_id not in refs:
            return
        refs.discard(request.request_id)
        if not refs:
            self.freeable[key] = self.tokens[key]
            self.num_freeable_slots += self.tokens[key]

    def free(self, request):
        for i in range(len(request.mm_features)):
            self.free_encoder_input(request, i)
"""

PROGRAM = """
import json
import random
import sys
from types import SimpleNamespace as NS

from vllm.multimodal.cache.base import MultiModalProcessorOnlyCache
from vllm.multimodal.cache.lru import LruKeyReplicatedSenderCache
from vllm.v1.core.encoder_cache_manager import EncoderCacheManager

kind, capacity, budget = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
cache = (LruKeyReplicatedSenderCache if kind == "lru" else MultiModalProcessorOnlyCache)(capacity)
rng = random.Random(5)
sizes = {f"img{i}": rng.randrange(1000, 9000) for i in range(30)}
sizes["huge"] = capacity + 1
requests = [[f"img{min(int(rng.paretovariate(1.2)) - 1, 29)}" for _ in range(rng.randrange(1, 4))] for _ in range(80)]
requests[10:10] = [["huge"], ["img0", "huge"]]
for keys in requests:
    cached = cache.is_cached(keys)
    for k in keys:
        cache.touch_sender_cache_item(k)
    for k, was in zip(keys, cached):
        cache.get_and_update_item(None if k in cache._cache else sizes[k], k)
dropped = None
if kind == "lru":  # the engine core lacked an item: the front end drops it from the sender
    dropped = next(iter(cache._cache.order))
    cache.invalidate(dropped)

manager = EncoderCacheManager(budget)
tokens = {k: n // 40 for k, n in sizes.items() if k != "huge"}
counts = {"lookups": 0, "hits": 0, "waits": 0}
inflight = []
for n, keys in enumerate(requests):
    keys = [k for k in keys if k != "huge"]
    feats = [NS(identifier=k) for k in keys]
    req = NS(request_id=f"r{n}", mm_features=feats, get_num_encoder_embeds=lambda i, f=feats: tokens[f[i].identifier])
    if len(inflight) >= 2:
        manager.free(inflight.pop(0))
    for i in range(len(keys)):
        counts["lookups"] += 1
        if manager.check_and_update_cache(req, i):
            counts["hits"] += 1
            continue
        while not manager.can_allocate(req, i, budget, 0) and inflight:
            counts["waits"] += 1
            manager.free(inflight.pop(0))
        manager.allocate(req, i)
    inflight.append(req)
print(json.dumps({"hits": cache._cache.hits, "total": cache._cache.total, "encoder": counts, "dropped": dropped}))
"""

MODULES = {
    "vllm.multimodal.cache.base": BASE,
    "vllm.multimodal.cache.lru": LRU,
    "vllm.v1.core.encoder_cache_manager": ENCODER,
}


def tree(root: Path) -> Path:
    """A package ``vllm`` with the stand-ins under ``root``, and ``program.py``; returns ``root``."""
    for module, source in MODULES.items():
        path = root.joinpath(*module.split(".")).with_suffix(".py")
        path.parent.mkdir(parents=True, exist_ok=True)
        for folder in path.parents:
            if folder == root:
                break
            (folder / "__init__.py").touch()
        path.write_text(source)
    (root / "program.py").write_text(PROGRAM)
    return root


def digests(root: Path) -> Path:
    """An extra digests file that makes the stand-ins' methods known (as for a reviewed patched build)."""
    sys.path.insert(0, str(RECORD_DIR))
    try:
        from mmpool_record.digest import module_digests
    finally:
        sys.path.remove(str(RECORD_DIR))
    known = {m: {k: {v: ["0.34.0"]} for k, v in module_digests(s, m).items()} for m, s in MODULES.items()}
    path = root / "digests.json"
    path.write_text(json.dumps({"format": 1, "modules": known}))
    return path


def replayed(out: Path) -> dict[str, Any]:
    """The JSON report of ``mmpool cache --engine vllm --trace out`` (exit 0 or 1: it printed a report)."""
    done = subprocess.run(
        [sys.executable, "-m", "mmpool_cli", "cache", "--engine", "vllm", "--trace", str(out), "--format", "json"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=300,
        check=False,
    )
    assert done.returncode in (0, 1), done.stderr
    return json.loads(done.stdout)  # type: ignore[no-any-return]
