"""SGLang 0.5.23's own preprocess cache (``MultimodalPreprocessCache``) recorded: its records and live series are
what it did.

The cache's code comes from the wheel (as ``test_caches`` finds it; the test skips without it, and without
torch). A seeded program drives it as the Qwen-VL processor's ``prepare_media_artifacts``
(``media_artifacts/base.py``) does: ``get_if_present`` with the artifact's identity check (a corrupt entry
taken out), ``pop`` of a miss, ``lookup_or_claim_many`` of the distinct misses, ``complete_miss`` of each
computed one (its bytes the class's own estimate); it sends one value larger than the cache and prints what
the cache itself counts (``stats``).
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
import metrics_pool as mp  # noqa: E402
from said import own_stderr  # noqa: E402

from mmpool_cli._record.mmpool_record import recfmt  # noqa: E402
from mmpool_cli.traces.record_stream import read_caches  # noqa: E402

MODULE = "sglang/srt/multimodal/cache/preprocess_cache.py"
SIZE = 1 << 20
pytestmark = [
    *mp.NEEDED,
    pytest.mark.skipif(importlib.util.find_spec("prometheus_client") is None, reason="no prometheus_client"),
    pytest.mark.skipif(importlib.util.find_spec("PIL") is None, reason="no Pillow (the cache's module imports it)"),
]

PROGRAM = """
import asyncio, json, random, sys
import numpy as np
from sglang.srt.multimodal.cache.preprocess_cache import CacheLookup, MultimodalPreprocessCache

cache = MultimodalPreprocessCache(max_size_bytes=int(sys.argv[1]), max_entries=int(sys.argv[2]))
rng = random.Random(5)
insertions = inserted_bytes = taken = taken_bytes = 0


def artifact(key, rows, usable=True):
    return {"key": key, "pixels": np.zeros((rows, 256), dtype=np.uint8), "usable": usable}


async def request(keys, usable):
    global insertions, inserted_bytes, taken, taken_bytes
    found = {}
    for key in keys:  # 1. cached artifacts, as _get_cached_artifact asks for them
        entry = cache._entries.get(key)
        got = cache.get_if_present(key, lambda v: v["key"] == key, evict_on_reject=True)
        if entry is not None and key not in cache._entries:  # an identity mismatch: taken out
            taken, taken_bytes = taken + 1, taken_bytes + entry.size_bytes
        if got is not None and (got["usable"] or not usable):
            found[key] = got
    misses = list(dict.fromkeys(k for k in keys if k not in found))
    for key in misses:  # 3. a miss's entry (featureless, say) taken out before it is claimed
        entry = cache._entries.get(key)
        if cache.pop(key) is not None:
            taken, taken_bytes = taken + 1, taken_bytes + entry.size_bytes
    results = cache.lookup_or_claim_many(misses, predicate=lambda k, v: v["usable"] or not usable)
    for key, result in zip(misses, results):
        if isinstance(result, CacheLookup) or not result.should_compute:
            continue
        value = artifact(key, rng.randrange(64, 1024), usable=rng.random() < 0.9)
        if rng.random() < 0.05:
            value["key"] = "another"  # a corrupt entry, which the next request's identity check takes out
        cache.complete_miss(result, value)
        if cache._entries.get(key) is not None and cache._entries[key].value is value:
            insertions, inserted_bytes = insertions + 1, inserted_bytes + cache._entries[key].size_bytes


async def main():
    for _ in range(150):
        keys = [f"image:{rng.randrange(30):02d}" for _ in range(rng.randrange(1, 4))]
        await request(keys, usable=rng.random() < 0.8)
    big = {"pixels": np.zeros((int(sys.argv[1]) + 1,), dtype=np.uint8)}
    return cache.put("too-large", big)


admitted = asyncio.run(main())
truth = cache.stats()
truth.update(insertions=insertions, inserted_bytes=inserted_bytes, taken=taken, taken_bytes=taken_bytes)
truth["admitted_large"] = admitted
print(json.dumps(truth))
"""


def tree(root: Path) -> Path:
    (root / MODULE).parent.mkdir(parents=True)
    with zipfile.ZipFile(str(mp.WHEEL)) as archive:
        (root / MODULE).write_bytes(archive.read(MODULE))
    for package in ("sglang", "sglang/srt", "sglang/srt/multimodal", "sglang/srt/multimodal/cache"):
        (root / package / "__init__.py").touch()
    (root / "program.py").write_text(PROGRAM)
    return root


def recorded(tmp_path: Path, entries: int, size: int = SIZE) -> tuple[dict, Path]:
    src, out = tree(tmp_path / "tree"), tmp_path / "rec"
    port = mp.free_port()
    env = {k: v for k, v in os.environ.items() if k.lower() != "prometheus_multiproc_dir"}
    env["PYTHONPATH"] = str(src)
    record = [sys.executable, "-m", "mmpool_cli", "record", "--out", str(out), "--metrics-port", str(port), "--"]
    done = subprocess.run(
        [*record, sys.executable, str(src / "program.py"), str(size), str(entries)],
        capture_output=True,
        text=True,
        env=env,
        cwd=mp.ROOT,
        timeout=300,
        check=False,
    )
    assert (done.returncode, own_stderr(done.stderr, nothing=size == 0)) == (0, "")  # a cache off: none made
    deadline = time.monotonic() + 30
    while (out / "follow.pid").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    return json.loads(done.stdout), out


@pytest.mark.parametrize("entries", [8192, 6])  # bounded by bytes; by entries
def test_the_preprocess_caches_records_and_series_are_what_it_did(tmp_path: Path, entries: int) -> None:
    truth, out = recorded(tmp_path, entries)
    assert truth["hits"] > 0 and truth["evictions"] > 0 and truth["taken"] > 0  # the program reached every path

    [cache] = read_caches(str(out), 10**6)
    info = cache.info
    assert (info[recfmt.K_CACHE], info[recfmt.K_CACHE_BYTES], info[recfmt.K_CACHE_ENTRIES]) == ("preprocess", SIZE, entries)
    assert "0.5.23" in info[recfmt.K_CODE_OF]
    lookups = [e for e in cache.events if e[1] == recfmt.CACHE_LOOKUP and e[4] >= 0]  # the counted ones
    assert sum(e[3] for e in lookups) == truth["hits"]
    assert sum(1 - e[3] for e in lookups) == truth["misses"]
    inserted = [e for e in cache.events if e[1] == recfmt.CACHE_INSERT]
    assert sum(e[3] > 0 for e in inserted) == truth["insertions"]
    assert sum(e[3] for e in inserted if e[3] > 0) == truth["inserted_bytes"]
    assert truth["admitted_large"] is False and inserted[-1][3:] == (-1, truth["size_bytes"])
    assert sum(e[2] for e in cache.events if e[1] == recfmt.CACHE_EVICT) == truth["evictions"]
    freed = [e for e in cache.events if e[1] == recfmt.CACHE_FREE]
    assert (len(freed), sum(e[3] for e in freed)) == (truth["taken"], truth["taken_bytes"])
    evicted_bytes = sum(e[3] for e in cache.events if e[1] == recfmt.CACHE_EVICT)
    assert truth["inserted_bytes"] - truth["taken_bytes"] - evicted_bytes == truth["size_bytes"]

    from prometheus_client.multiprocess import MultiProcessCollector

    got = {
        (s.name, s.labels["cache"]): s.value
        for f in MultiProcessCollector(None, path=str(out / "metrics.d")).collect()
        for s in f.samples
        if s.name.startswith("mmpool_cache_")
    }
    assert got == {
        ("mmpool_cache_capacity_bytes", "preprocess"): SIZE,
        ("mmpool_cache_bytes", "preprocess"): truth["size_bytes"],
        ("mmpool_cache_entries", "preprocess"): truth["entries"],
        ("mmpool_cache_lookups_total", "preprocess"): truth["hits"] + truth["misses"],
        ("mmpool_cache_hits_total", "preprocess"): truth["hits"],
        ("mmpool_cache_insertions_total", "preprocess"): truth["insertions"],
        ("mmpool_cache_evictions_total", "preprocess"): truth["evictions"],
        ("mmpool_cache_evicted_bytes_total", "preprocess"): evicted_bytes,
    }


def test_a_disabled_preprocess_cache_records_nothing(tmp_path: Path) -> None:
    truth, out = recorded(tmp_path, 8192, size=0)  # Qwen-VL's default: 0 MiB, the cache off
    assert (truth["hits"], truth["misses"], truth["entries"]) == (0, 0, 0)  # it counts nothing either
    assert read_caches(str(out), 10**6) == []
