"""``mmpool cache --trace REC_DIR``: SGLang 0.5.23's own preprocess cache, recorded, replayed at other sizes.

A seeded program drives the wheel's ``MultimodalPreprocessCache`` as the Qwen-VL processor's
``prepare_media_artifacts`` does: a request's images looked up (``get_if_present``), its distinct misses
claimed (``lookup_or_claim_many``) and stored once computed (``complete_miss``, the class's own byte
estimate). An image's artifact depends on the image alone, so the same program at another size, or with
another bound on entries, is what the tokenizer process would have done there. The replay makes the
recorded hits at the recorded size; at other sizes the class's own hits given where each request began
(the program says so on stderr).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
import metrics_pool as mp  # noqa: E402
from test_preprocess_cache import pytestmark as needed  # noqa: E402
from test_preprocess_cache import tree  # noqa: E402

from mmpool_cli.caches.recorded import recorded_lookups  # noqa: E402
from mmpool_cli.caches.replay import Lookups, replay  # noqa: E402
from mmpool_cli.traces.record_stream import read_caches  # noqa: E402

SIZE = 1 << 20
pytestmark = needed

PROGRAM = """
import asyncio, json, random, sys
import numpy as np
from sglang.srt.multimodal.cache.preprocess_cache import CacheLookup, MultimodalPreprocessCache

cache = MultimodalPreprocessCache(max_size_bytes=int(sys.argv[1]), max_entries=int(sys.argv[2]))
rng = random.Random(9)
truth = {"lookups": 0, "hits": 0}


def artifact(image):  # an image's artifact is its own at every size
    return {"key": image, "pixels": np.zeros((64 + hash(image) % 900, 256), dtype=np.uint8)}


async def request(step, images):
    found = {}
    for image in images:  # _get_cached_artifact: a hit counted, an absent image not (yet)
        if cache.get_if_present(image, lambda v: v["key"] == image, evict_on_reject=True) is not None:
            found[image] = True
            truth["lookups"] += 1
            truth["hits"] += 1
            print(step, file=sys.stderr)
    misses = list(dict.fromkeys(i for i in images if i not in found))
    for image in misses:
        cache.pop(image)
    results = cache.lookup_or_claim_many(misses)
    for image, result in zip(misses, results):
        truth["lookups"] += 1
        print(step, file=sys.stderr)
        if isinstance(result, CacheLookup):
            truth["hits"] += 1
        elif result.should_compute:
            cache.complete_miss(result, artifact(image))


async def main():
    for step in range(200):
        await request(step, [f"image:{rng.randrange(40):02d}" for _ in range(rng.randrange(1, 4))])


asyncio.run(main())
print(json.dumps(truth))
"""



run = mp.run_program


def hits_at(src: Path, size: int, entries: int) -> int:
    done = run(src, str(size), str(entries))
    assert done.returncode == 0, done.stderr
    return int(json.loads(done.stdout)["hits"])


@pytest.mark.parametrize("entries", [8192, 9])  # bounded by bytes; by entries
def test_a_recorded_preprocess_cache_replays_as_the_class_does_at_every_size(tmp_path: Path, entries: int) -> None:
    src, out = tree(tmp_path / "tree"), tmp_path / "rec"
    (src / "program.py").write_text(PROGRAM)
    done = run(src, str(SIZE), str(entries), record=out)
    assert done.returncode == 0, done.stderr
    truth, batches = json.loads(done.stdout), [int(step) for step in done.stderr.split()]

    got = subprocess.run(
        [sys.executable, "-m", "mmpool_cli", "cache", "--trace", str(out), "--format", "json"],
        capture_output=True,
        text=True,
        cwd=mp.ROOT,
        timeout=300,
    )
    assert got.returncode in (0, 1), got.stderr
    [cache] = json.loads(got.stdout)["caches"]
    assert cache["name"] == "preprocess"
    assert (cache["size_bytes"], cache["lookups"], cache["hits"]) == (SIZE, truth["lookups"], truth["hits"])
    assert 0 < truth["hits"] < truth["lookups"]
    assert not [f for f in json.loads(got.stdout)["findings"] if f["code"] == "cache-replay-differs"]

    [trace] = read_caches(str(out), 10**6)
    rec = recorded_lookups(trace.info, trace.events)
    assert rec.lookups.max_entries == entries and len(rec.lookups.keys) == len(batches)
    lk = rec.lookups
    told = Lookups(lk.keys, lk.sizes, lk.weights, lk.work, batches, max_entries=entries)
    for size in (SIZE // 4, 600_000, 2 * SIZE, 8 * SIZE):  # what the class itself makes at that size
        assert replay(told, size)[0] == hits_at(src, size, entries), size
    assert cache["curve"][-1]["size_bytes"] > SIZE
    if entries == 8192:
        assert cache["curve"][-1]["hits"] > truth["hits"]
        assert cache["recommended_setting"].startswith("--mm-preprocess-cache-size-mb ")
