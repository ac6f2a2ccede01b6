"""SGLang 0.5.23's own embedding cache (``MultiModalStaticCache``) recorded: its records and live series are what it did.

The cache's code comes from the wheel (as ``test_real_pool`` finds it; the test skips without it, and
without torch); a stand-in ``allocator`` module is all it imports besides torch. A seeded program
looks items up and inserts them as the scheduler does (a miss then ``set``), repeats some, sends one
larger than the cache, frees one; it prints what the cache itself counts.
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

MODULE = "sglang/srt/mem_cache/multimodal_cache.py"
SIZE = 1 << 20
pytestmark = [
    *mp.NEEDED,
    pytest.mark.skipif(importlib.util.find_spec("prometheus_client") is None, reason="no prometheus_client"),
]

PROGRAM = """
import json, random, sys
import torch
from sglang.srt.mem_cache.multimodal_cache import EmbeddingResult, MultiModalStaticCache

cache = MultiModalStaticCache(max_size=int(sys.argv[1]))
rng = random.Random(3)
truth = {"lookups": 0, "hits": 0, "insertions": 0, "inserted_bytes": 0, "freed": 0, "freed_bytes": 0}
for step in range(300):
    key = rng.randrange(40) * 0x9E3779B97F4A7C15  # hashes as large as SGLang's: past 2**63 too
    single = step % 3 == 0
    found = cache.get_single(key) if single else cache.get([key])
    key = key if single else cache.combine_hashes([key])
    truth["lookups"] += 1
    if found is not None:
        truth["hits"] += 1
        continue
    rows = rng.randrange(16, 160)
    tensor = torch.zeros((rows, 256), dtype=torch.bfloat16)
    if cache.set(key, EmbeddingResult(embedding=tensor)) and key in cache.mm_cache:
        truth["insertions"] += 1
        truth["inserted_bytes"] += tensor.untyped_storage().nbytes()
    if step == 200 and cache.mm_cache:
        first = next(iter(cache.mm_cache))
        nbytes = cache.mm_cache[first].embedding.untyped_storage().nbytes()
        if cache.free(first, None):
            truth["freed"] += 1
            truth["freed_bytes"] += nbytes
large = torch.zeros((4096, 256), dtype=torch.bfloat16)  # larger than the cache: not admitted
truth["admitted_large"] = cache.set(7, EmbeddingResult(embedding=large))
truth["entries"], truth["bytes"] = len(cache), cache.current_size
print(json.dumps(truth))
"""


def tree(root: Path) -> Path:
    (root / MODULE).parent.mkdir(parents=True)
    with zipfile.ZipFile(str(mp.WHEEL)) as archive:
        (root / MODULE).write_bytes(archive.read(MODULE))
    for package in ("sglang", "sglang/srt", "sglang/srt/mem_cache"):
        (root / package / "__init__.py").touch()
    (root / "sglang/srt/mem_cache/allocator.py").write_text("BaseTokenToKVPoolAllocator = object\n")
    (root / "program.py").write_text(PROGRAM)
    return root


def test_the_embedding_caches_records_and_series_are_what_it_did(tmp_path: Path) -> None:
    src, out = tree(tmp_path / "tree"), tmp_path / "rec"
    port = mp.free_port()
    env = {k: v for k, v in os.environ.items() if k.lower() != "prometheus_multiproc_dir"}
    env["PYTHONPATH"] = str(src)
    record = [sys.executable, "-m", "mmpool_cli", "record", "--out", str(out), "--metrics-port", str(port), "--"]
    done = subprocess.run(
        [*record, sys.executable, str(src / "program.py"), str(SIZE)],
        capture_output=True,
        text=True,
        env=env,
        cwd=mp.ROOT,
        timeout=300,
        check=False,
    )
    assert (done.returncode, own_stderr(done.stderr)) == (0, "")
    truth = json.loads(done.stdout)
    deadline = time.monotonic() + 30
    while (out / "follow.pid").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    evicted = truth["insertions"] - truth["freed"] - truth["entries"]
    assert truth["hits"] > 0 and evicted > 0  # repeats that hit, and a cache small enough to evict

    [cache] = read_caches(str(out), 10**6)
    assert cache.info[recfmt.K_CACHE] == "embedding" and cache.info[recfmt.K_CACHE_BYTES] == SIZE
    assert "0.5.23" in cache.info[recfmt.K_CODE_OF]
    kinds = [e[1] for e in cache.events]
    assert kinds.count(recfmt.CACHE_LOOKUP) == truth["lookups"]
    assert sum(e[3] for e in cache.events if e[1] == recfmt.CACHE_LOOKUP) == truth["hits"]
    inserted = [e for e in cache.events if e[1] == recfmt.CACHE_INSERT]
    assert sum(e[3] > 0 for e in inserted) == truth["insertions"]
    assert sum(e[3] == -1 for e in inserted) == 1  # the one larger than the cache
    assert sum(e[2] for e in cache.events if e[1] == recfmt.CACHE_EVICT) == evicted
    assert truth["admitted_large"] is False and inserted[-1][3:] == (-1, truth["bytes"])  # the cache's bytes after

    from prometheus_client.multiprocess import MultiProcessCollector

    got = {
        s.name: s.value
        for f in MultiProcessCollector(None, path=str(out / "metrics.d")).collect()
        for s in f.samples
        if s.name.startswith("mmpool_cache_")
    }
    assert got == {
        "mmpool_cache_capacity_bytes": SIZE,
        "mmpool_cache_bytes": truth["bytes"],
        "mmpool_cache_entries": truth["entries"],
        "mmpool_cache_lookups_total": truth["lookups"],
        "mmpool_cache_hits_total": truth["hits"],
        "mmpool_cache_insertions_total": truth["insertions"],
        "mmpool_cache_evictions_total": evicted,
        "mmpool_cache_evicted_bytes_total": truth["inserted_bytes"] - truth["freed_bytes"] - truth["bytes"],
    }
