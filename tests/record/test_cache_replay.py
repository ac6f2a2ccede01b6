"""``mmpool cache --trace REC_DIR``: SGLang 0.5.23's own embedding cache, recorded, replayed at other sizes.

A seeded program drives the wheel's ``MultiModalStaticCache`` as ``mm_schedule.py`` does: a batch's
distinct items looked up (``get_single``), its misses stored (``set``), each stored embedding read
back; now and then a request's items looked up and stored together (``get`` of the combined hash).
Its entries' bytes depend on the item alone, so the same program at another size is what the server
would have done there. The replay makes the recorded hits at the recorded size; at other sizes it
makes the class's own hits given where each batch began (the program says so on stderr), which the
records say only where a store ends a batch (docs/record.md).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
import metrics_pool as mp  # noqa: E402
from test_caches import tree  # noqa: E402

from mmpool_cli.caches.recorded import recorded_lookups  # noqa: E402
from mmpool_cli.caches.replay import Lookups, replay  # noqa: E402
from mmpool_cli.traces.record_stream import read_caches  # noqa: E402

SIZE = 1 << 20
pytestmark = mp.NEEDED

PROGRAM = """
import json, random, sys
import torch
from sglang.srt.mem_cache.multimodal_cache import EmbeddingResult, MultiModalStaticCache

cache = MultiModalStaticCache(max_size=int(sys.argv[1]))
large = sys.argv[2] == "1"
rng = random.Random(5)
HASH = 0x9E3779B97F4A7C15  # hashes as large as SGLang's: past 2**63 too
truth = {"lookups": 0, "hits": 0}


def embedding(rows):
    return EmbeddingResult(embedding=torch.zeros((rows, 256), dtype=torch.bfloat16))


def rows(item):
    return 4096 if item == 999 else 16 + item * 37 % 144  # an item's bytes are its own at every size


for step in range(240):
    if step % 7 == 3:  # a request's items looked up and stored together (_get_chunked_embedding_full)
        items = [100 + rng.randrange(12) for _ in range(2)]
        truth["lookups"] += 1
        print(step, file=sys.stderr)
        if cache.get([i * HASH for i in items]) is not None:
            truth["hits"] += 1
        else:
            cache.set(cache.combine_hashes([i * HASH for i in items]), embedding(sum(rows(i) for i in items)))
        continue
    batch = list(dict.fromkeys(rng.randrange(40) for _ in range(rng.randint(1, 4))))
    if large and step == 151:
        batch.append(999)  # larger than the cache: not admitted
    misses = []
    for item in batch:  # _batch_encode_per_image_misses: every distinct item looked up, then the misses stored
        truth["lookups"] += 1
        print(step, file=sys.stderr)
        if cache.get_single(item * HASH) is not None:
            truth["hits"] += 1
        else:
            misses.append(item)
    for item in misses:
        if cache.set(item * HASH, embedding(rows(item))):
            cache.get_single(item * HASH)  # the scheduler reads the stored embedding back
print(json.dumps(truth))
"""



run = mp.run_program


def hits_at(src: Path, size: int, large: str) -> int:
    done = run(src, str(size), large)
    assert done.returncode == 0, done.stderr
    return int(json.loads(done.stdout)["hits"])


def mmpool(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "mmpool_cli", *args], capture_output=True, text=True, cwd=mp.ROOT, timeout=300
    )


@pytest.mark.parametrize("large", ["0", "1"])
def test_a_recorded_embedding_cache_replays_as_the_class_does_at_every_size(tmp_path: Path, large: str) -> None:
    src, out = tree(tmp_path / "tree"), tmp_path / "rec"
    (src / "program.py").write_text(PROGRAM)
    done = run(src, str(SIZE), large, record=out)
    assert done.returncode == 0, done.stderr
    truth, batches = json.loads(done.stdout), [int(step) for step in done.stderr.split()]

    got = mmpool("cache", "--trace", str(out), "--format", "json")
    assert got.returncode in (0, 1), got.stderr
    [cache] = json.loads(got.stdout)["caches"]
    assert (cache["size_bytes"], cache["lookups"], cache["hits"]) == (SIZE, truth["lookups"], truth["hits"])
    assert 0 < truth["hits"] < truth["lookups"]
    assert not [f for f in json.loads(got.stdout)["findings"] if f["code"] == "cache-replay-differs"]

    [trace] = read_caches(str(out), 10**6)
    rec = recorded_lookups(trace.info, trace.events)
    assert rec.unsized == int(large) and len(rec.lookups.keys) == len(batches)
    lk = rec.lookups
    told = Lookups(lk.keys, lk.sizes, lk.weights, lk.work, batches)  # the batches as the program made them
    others = [SIZE // 4, 600_000] if large == "1" else [SIZE // 4, 600_000, 2 * SIZE, 8 * SIZE]
    for size in others:  # what the class itself makes at that size
        assert replay(told, size)[0] == hits_at(src, size, large), size
    assert rec.joined > 0  # hit-only batches the records cannot tell from the next: said in the notes
    assert any("read as one" in note for note in cache["notes"])
    if large == "1":  # past the recorded size the large item's bytes would decide: the curve stops there
        assert cache["curve"][-1]["size_bytes"] == SIZE
    else:
        assert cache["curve"][-1]["size_bytes"] > SIZE and cache["curve"][-1]["hits"] > truth["hits"]
