"""The embedding cache's batches as SGLang 0.5.23's own scheduler code makes them, recorded: exact at every size.

The program runs the wheel's ``mm_schedule.py`` (its batch function ``_batch_encode_per_image_misses``,
which looks a forward pass's items up, encodes the misses in one call and stores them, and
``_get_chunked_embedding_full``, a request's items under one combined key) over the wheel's
``MultiModalStaticCache``; what ``mm_schedule`` imports besides is stood in for (no model, no GPU:
the encoder returns one zero tensor per item, whose rows depend on the item alone). Many of its batches
hit every item: where one ends, only the record ``mmpool record`` writes as each batch begins says so
(``CACHE_BATCH``). With it, the replay of the recording makes the hits that the same program makes at
every other size, run there; the program counts its hits itself, SGLang's read-back after a store not
among them. The wheel is found as the other tests here find it (``$MMPOOL_SGLANG_WHEEL``).
"""

from __future__ import annotations

import json
import sys
import zipfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import metrics_pool as mp  # noqa: E402

from mmpool_cli._record.mmpool_record import recfmt  # noqa: E402
from mmpool_cli.caches.recorded import recorded_lookups  # noqa: E402
from mmpool_cli.caches.replay import replay  # noqa: E402
from mmpool_cli.traces.record_stream import read_caches  # noqa: E402

SIZE = 1 << 20
MODULES = ("sglang/srt/mem_cache/multimodal_cache.py", "sglang/srt/managers/mm_schedule.py")
pytestmark = mp.NEEDED

PROGRAM = """
import json, random, sys, types

import torch


def stand_in(name, **attrs):  # what mm_schedule imports besides the cache: none of it runs here
    module = types.ModuleType(name)
    module.__dict__.update(attrs)
    sys.modules[name] = module


class EVSEmbeddingResult:
    pass


stand_in("sglang.srt.managers.schedule_batch", MultimodalDataItem=object)
stand_in("sglang.srt.multimodal", __path__=[])
stand_in("sglang.srt.multimodal.transport", __path__=[])
stand_in("sglang.srt.multimodal.evs", EVSEmbeddingResult=EVSEmbeddingResult)
stand_in("sglang.srt.multimodal.transport.cuda_ipc", BORROW_CUDA_IPC_FEATURE_KEY="borrow")
stand_in("sglang.srt.runtime_context", get_schedule=lambda: None)
stand_in("sglang.srt.utils", __path__=[], is_hip=lambda: False, is_npu=lambda: False, is_xpu=lambda: False)
stand_in("sglang.srt.utils.async_probe", maybe_assert_sum=lambda *a, **k: None)
stand_in("sglang.utils", logger=__import__("logging").getLogger("sglang"))

from sglang.srt.managers import mm_schedule  # noqa: E402

HIDDEN = 256
HASH = 0x9E3779B97F4A7C15  # hashes as large as SGLang's: past 2**63 too


def rows(item):
    return 16 + item * 37 % 144  # an item's tokens, hence its entry's bytes, are its own at every size


class Item:
    def __init__(self, item, start):
        self.hash = item * HASH
        self.offsets = [(start, start + rows(item) - 1)]
        self.feature = None
        self.model_specific_data = {}

    def can_defer_cuda_ipc_feature_reconstruction(self):
        return False


def encode(items):  # one tensor per item: each entry owns its storage, as SGLang's per-item path stores it
    return [torch.zeros((item.offsets[-1][1] - item.offsets[0][0] + 1, HIDDEN), dtype=torch.bfloat16) for item in items]


def encode_whole(items):  # the combined path's encoder: one tensor for the request's items
    return torch.cat(encode(items))


mm_schedule.init_mm_embedding_cache(int(sys.argv[1]))
cache = mm_schedule.embedding_cache
truth = {"lookups": 0, "hits": 0}
just_stored = [None]
get, get_single, set_ = cache.get, cache.get_single, cache.set


def counted(found, key=None):
    if key is not None and key == just_stored[0]:  # the per-image path reading back what it just stored
        just_stored[0] = None
        return found
    just_stored[0] = None
    truth["lookups"] += 1
    truth["hits"] += found is not None
    return found


def stored(key, value):
    kept = set_(key, value)
    just_stored[0] = key if kept else None
    return kept


cache.get = lambda hashes: counted(get(hashes))
cache.get_single = lambda key: counted(get_single(key), key)
cache.set = stored
rng = random.Random(11)
cpu = torch.device("cpu")
for step in range(160):
    if step % 9 == 4:  # a request whose items go the combined way (_get_chunked_embedding_full)
        items, start = [], 0
        for item in (200 + rng.randrange(6), 200 + rng.randrange(6)):
            items.append(Item(item, start))
            start += rows(item)
        offsets = [i.offsets[0] for i in items]
        ids = torch.zeros(start, dtype=torch.long)
        mm_schedule._get_chunked_embedding_full(encode_whole, items, offsets, 0, start, ids, cpu)
        continue
    # a forward pass of 1 to 3 requests, each of 1 to 3 images: popular items often, so that whole
    # batches hit at the recorded size
    requests = []
    for index in range(rng.randint(1, 3)):
        items, start = [], 0
        for _ in range(rng.randint(1, 3)):
            item = rng.randrange(6) if rng.random() < 0.6 else rng.randrange(6, 40)
            items.append(Item(item, start))
            start += rows(item)
        info = mm_schedule.PerImageRequestInfo(index, items, [i.offsets[0] for i in items], 0, start)
        requests.append(info)
    mm_schedule._batch_encode_per_image_misses(encode, requests, cpu)
print(json.dumps(truth))
"""


def tree(root: Path) -> Path:
    with zipfile.ZipFile(str(mp.WHEEL)) as archive:
        for member in MODULES:
            (root / member).parent.mkdir(parents=True, exist_ok=True)
            (root / member).write_bytes(archive.read(member))
    for package in ("sglang", "sglang/srt", "sglang/srt/mem_cache", "sglang/srt/managers"):
        (root / package / "__init__.py").touch()
    (root / "sglang/srt/mem_cache/allocator.py").write_text("BaseTokenToKVPoolAllocator = object\n")
    (root / "program.py").write_text(PROGRAM)
    return root


def hits_at(src: Path, size: int) -> int:
    done = mp.run_program(src, str(size))
    assert done.returncode == 0, done.stderr
    return int(json.loads(done.stdout)["hits"])


def test_a_recording_of_sglangs_own_batches_replays_exactly_at_every_size(tmp_path: Path) -> None:
    src, out = tree(tmp_path / "tree"), tmp_path / "rec"
    done = mp.run_program(src, str(SIZE), record=out)
    assert (done.returncode, done.stderr) == (0, ""), done.stderr  # every module known: nothing said
    truth = json.loads(done.stdout)

    [trace] = read_caches(str(out), 10**6)
    assert sum(e[1] == recfmt.CACHE_BATCH for e in trace.events) == 160  # one each time a batch began
    rec = recorded_lookups(trace.info, trace.events)
    assert (len(rec.lookups.keys), rec.hits) == (truth["lookups"], truth["hits"])
    assert 0 < rec.hits < len(rec.lookups.keys) and rec.joined == 0  # every batch where the scheduler began it
    for size in (SIZE // 8, SIZE // 4, 600_000, SIZE, 2 * SIZE, 8 * SIZE):  # what SGLang's code makes there
        assert replay(rec.lookups, size)[0] == hits_at(src, size), size

    # the same records without the marks (a recording of another release): batches of hits only are read as
    # one with the next, and an item looked up again after a miss as a batch of its own; not what SGLang does
    unmarked = [e for e in trace.events if e[1] != recfmt.CACHE_BATCH]
    old = recorded_lookups(trace.info, unmarked)
    assert old.joined > 0
    differs = [size for size in (SIZE // 8, SIZE // 4, SIZE) if replay(old.lookups, size)[0] != hits_at(src, size)]
    assert differs, "the marks made no difference here: the test shows nothing"


def test_a_scheduler_of_other_code_leaves_the_cache_recorded_and_says_its_batches_are_not_marked(
    tmp_path: Path,
) -> None:
    src, out = tree(tmp_path / "tree"), tmp_path / "rec"
    module = src / MODULES[1]
    text = module.read_text()  # a local patch: the batch function's code is not 0.5.23's
    module.write_text(text.replace("    unique_misses: Dict", "    # patched here\n    unique_misses: Dict", 1))
    done = mp.run_program(src, str(SIZE), record=out)
    assert done.returncode == 0
    assert done.stderr == (
        "mmpool record: sglang.srt.managers.mm_schedule: _batch_encode_per_image_misses is code mmpool does not "
        "know (another release, or a local patch): the embedding cache's batches are not marked (its records are "
        "kept; a replay at other sizes reads its batches from them, as docs/record.md says)\n"
    )
    [trace] = read_caches(str(out), 10**6)
    kinds = {e[1] for e in trace.events}
    assert recfmt.CACHE_LOOKUP in kinds and recfmt.CACHE_BATCH not in kinds
