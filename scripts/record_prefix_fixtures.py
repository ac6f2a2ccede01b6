"""Make tests/data/prefix_fixtures.json: the prefix caches of SGLang 0.5.23 and vLLM 0.34.0, driven by their own code.

    pip download --no-deps sglang==0.5.23 vllm==0.34.0 -d /tmp/prefix-wheels
    cd /tmp/prefix-wheels && mkdir sg vl && unzip -q sglang-0.5.23-*.whl -d sg && unzip -q vllm-0.34.0-*.whl -d vl
    python -m venv /tmp/prefix-venv    # CPU torch, and what the two packages import (below)
    /tmp/prefix-venv/bin/python scripts/record_prefix_fixtures.py /tmp/prefix-wheels/sg /tmp/prefix-wheels/vl

Runs on the CPU. The venv needs torch (any CPU build >= 2.1; 2.13.0+cpu made the committed file),
numpy, msgspec, pydantic, transformers, triton and apache-tvm-ffi (imported, never run), and the
modules the two packages import at start-up (installed with ``--no-deps``: orjson psutil pybase64
starlette pyzmq IPython aiohttp dill sentencepiece compressed-tensors loguru gguf openai sniffio
partial-json-parser cachetools cbor2 cloudpickle uvloop py-cpuinfo llguidance xgrammar);
``torchvision``, which an SGLang config module imports and nothing here calls, is stubbed.

What runs is the engines' own code, unchanged:

* SGLang: ``RadixCache`` (``mem_cache/radix_cache.py``) on its own ``TokenToKVPoolAllocator`` or
  ``PagedTokenToKVPoolAllocator`` of ``capacity_tokens`` slots (its ``kvcache`` is the one
  stand-in: nothing here reads or writes KV) and its own ``ReqToTokenPool``; each request is a real
  ``Req``. A request is admitted as the scheduler admits one: ``Req.init_next_round_input`` (the
  match, at most ``len - 1`` tokens), ``tree_cache.lock`` (``PrefillAdder``), ``alloc_req_slots``,
  ``alloc_token_slots`` / ``alloc_paged_token_slots_extend`` (evicting first), the row written as
  ``write_cache_indices`` writes it, then ``checkpoint_kv_cache`` (the prefill's insert); each
  decode step ``alloc_token_slots`` / ``alloc_paged_token_slots_decode`` for one token; at its
  release ``release_kv_cache(checkpoint=True)``. Images are padded by SGLang's own
  ``MultimodalDataItem.set_hash`` / ``padding_sequence`` (``managers/schedule_batch.py``).
* vLLM: ``KVCacheManager`` over one full-attention group of ``num_blocks`` blocks, requests as
  ``vllm.v1.request.Request`` with the default block hasher (``sha256``) and their images as
  ``MultiModalFeatureSpec`` (identifier = the item's hash); admitted as the scheduler admits one
  (``get_computed_blocks``, ``allocate_slots`` with the hit and ``full_sequence_must_fit``), each
  decode step an output token appended and ``allocate_slots`` for one token, then ``free``.

Each scenario's requests are admitted and released in time order (releases first at one time), one
at a time, each decode step just before the release, at several capacities; a capacity at which the
engine's own allocation fails (it would have queued the request) is skipped, and said so. The JSON
holds each scenario's requests (each extending an earlier one's prompt and output, so it stays
small) and, per capacity, the prompt tokens each engine served from its cache.
"""

from __future__ import annotations

import argparse
import importlib.abc
import importlib.machinery
import json
import random
import sys
import tempfile
import types
from array import array
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from unittest import mock

OUT = Path(__file__).resolve().parent.parent / "tests" / "data" / "prefix_fixtures.json"
IMAGE_TOKEN = 151655  # Qwen2.5-VL's <|image_pad|>: vLLM keeps it, SGLang pads over it
VOCAB = 150_000


class _Stub(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """torchvision: imported by an SGLang config module, never called here."""

    def find_spec(self, name: str, path: Any, target: Any = None) -> importlib.machinery.ModuleSpec | None:
        if name.split(".")[0] == "torchvision":
            return importlib.machinery.ModuleSpec(name, self, is_package=True)
        return None

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        m = types.ModuleType(spec.name)
        m.__path__ = []
        m.__getattr__ = lambda attr: mock.MagicMock(name=f"{spec.name}.{attr}")  # type: ignore[method-assign]
        return m

    def exec_module(self, module: types.ModuleType) -> None:
        pass


# --- scenarios -----------------------------------------------------------------------------------


@dataclass
class Req:
    parent: int | None  # the prompt starts with this request's prompt and output
    text: list[int]  # what follows: text tokens, and images as (hash, length) entries
    images: list[tuple[int, int, int]] = field(default_factory=list)  # (position in ``text``, hash, length)
    output: list[int] = field(default_factory=list)
    arrive: int = 0
    finish: int = 0


def _text(rng: random.Random, n: int) -> list[int]:
    return [rng.randrange(10, VOCAB) for _ in range(n)]


def chats(
    seed: int, conversations: int, turns: int, *, overlap: bool, systems: int, pool: int, image_p: float
) -> list[Req]:
    """Multi-turn chats: each turn's prompt is the previous turn's prompt and reply and new words,
    some with images (drawn from ``pool`` distinct ones, so chats share them); ``systems`` system
    prompts shared among the chats. Without ``overlap`` one request runs at a time, the chats taking
    turns (so a chat's next turn finds its history only if the others left it room); with it, turns
    of different chats run at once."""
    rng = random.Random(seed)
    system = [_text(rng, rng.choice((24, 40, 57))) for _ in range(systems)]
    images = [(rng.getrandbits(64), rng.choice((16, 33, 64, 100))) for _ in range(pool)]
    plan: list[tuple[int, int, int, Req]] = []  # (arrive, turn, chat, request)
    for c in range(conversations):
        t = rng.randrange(0, 60)
        prev: Req | None = None
        for k in range(turns):
            text: list[int] = list(system[c % systems]) if prev is None else _text(rng, rng.randrange(1, 6))
            imgs: list[tuple[int, int, int]] = []
            for _ in range(rng.choice((1, 1, 2, 3)) if rng.random() < image_p else 0):
                h, ln = rng.choice(images)
                text += _text(rng, 2)
                imgs.append((len(text), h, ln))
            text += _text(rng, rng.randrange(3, 30))
            out = _text(rng, rng.randrange(1, 40))
            life = rng.randrange(5, 40)
            r = Req(None, text, imgs, out, arrive=t, finish=t + life)
            plan.append((t if overlap else k, k, c, r))
            r.parent = id(prev) if prev is not None else None  # resolved to an index below
            prev = r
            t += life + rng.randrange(20, 200)
    plan.sort(key=lambda x: (x[0], x[1], x[2]))
    index = {id(r): i for i, (_t, _k, _c, r) in enumerate(plan)}
    reqs = [r for _t, _k, _c, r in plan]
    for i, r in enumerate(reqs):
        if r.parent is not None:
            r.parent = index[r.parent]
        if not overlap:  # one at a time, in the round-robin order
            r.arrive, r.finish = 10 * i, 10 * i + 5
    return reqs


def edges(seed: int) -> list[Req]:
    """Prompts of one token, of exactly one and two blocks, the same prompt again and again (full
    hits: the last token recomputed; vLLM caches a duplicate block), the same image at two offsets
    within a block, and a long prompt that needs most of the pool."""
    rng = random.Random(seed)
    base = _text(rng, 32)
    img = rng.getrandbits(64)
    rows: list[tuple[list[int], list[tuple[int, int, int]], int]] = [
        ([5], [], 3),
        ([5], [], 1),
        (base[:16], [], 4),
        (base[:16], [], 4),
        (list(base), [], 2),
        (list(base), [], 1),
        (list(base), [], 9),
        (base[:3], [(3, img, 20)], 5),
        (base[:5], [(5, img, 20)], 5),
        (base[:3], [(3, img, 20)], 5),
        (base[:3] + [7] * 200, [], 2),
        (list(base), [], 3),
        (base[:16], [], 4),
        (base[:5], [(5, img, 20)], 5),
        (base[:3] + [7] * 100, [], 30),
        (list(base), [], 3),
        (base[:3], [(3, img, 20)], 5),
        (base[:16], [], 1),
    ]
    reqs: list[Req] = []
    t = 0
    for text, imgs, out_len in rows:
        reqs.append(Req(None, list(text), list(imgs), _text(rng, out_len), arrive=t, finish=t + 5))
        t += 10
    return reqs


def exact(seed: int) -> list[Req]:
    """Leaves whose tokens are exactly the shortfall (the eviction stops there, not a leaf later),
    at the capacities ``EXACT_CAPACITIES`` gives."""
    rng = random.Random(seed)
    a, b, c, d = (_text(rng, 10) for _ in range(4))
    rows = [(a, 1), (b, 1), (c, 1), (b + [3], 1), (a + [4], 1), (d + d, 1), (a + [5], 1), (b + [6], 1)]
    return [Req(None, list(t), [], _text(rng, n), arrive=10 * i, finish=10 * i + 5) for i, (t, n) in enumerate(rows)]


def duplicates(seed: int) -> list[Req]:
    """Prompts of exactly two or three blocks from ten bases, often running at once: a full hit
    recomputes its last block and vLLM caches a duplicate; longer prompts then find the first block
    cached under a key while the others are held, freed or evicted."""
    rng = random.Random(seed)
    bases = [_text(rng, rng.choice((32, 48))) for _ in range(10)]
    reqs: list[Req] = []
    t = 0
    for _ in range(150):
        base = rng.choice(bases)
        text = list(base) if rng.random() < 0.5 else list(base) + _text(rng, rng.choice((1, 8, 16, 20)))
        life = rng.randrange(5, 120)
        reqs.append(Req(None, text, [], _text(rng, rng.randrange(1, 20)), arrive=t, finish=t + life))
        t += rng.randrange(1, 30)
    return reqs


# --- the engines' tokens -------------------------------------------------------------------------


def expand(reqs: list[Req], pad: Any) -> list[tuple[list[int], list[tuple[int, int, int]]]]:
    """Each request's prompt tokens and its items ``(start, length, hash)``; ``pad(hash, length)``
    gives an image's tokens."""
    out: list[tuple[list[int], list[tuple[int, int, int]]]] = []
    for r in reqs:
        if r.parent is None:
            toks: list[int] = []
            items: list[tuple[int, int, int]] = []
        else:
            ptoks, pitems = out[r.parent]
            toks = ptoks + reqs[r.parent].output
            items = list(pitems)
        at = 0
        for pos, h, ln in r.images:
            toks += r.text[at:pos]
            items.append((len(toks), ln, h))
            toks += pad(h, ln)
            at = pos
        toks += r.text[at:]
        out.append((toks, items))
    return out


def events(reqs: list[Req]) -> list[tuple[int, int, int, int]]:
    ev: list[tuple[int, int, int, int]] = []
    for i, r in enumerate(reqs):
        ev.append((r.arrive, 1, i, 0))
        ev.append((r.finish, 0, i, 1) if r.finish > r.arrive else (r.arrive, 1, i, 1))
    ev.sort()
    return ev


# --- SGLang --------------------------------------------------------------------------------------


def sglang_pad() -> Any:
    from sglang.srt.managers.schedule_batch import MultimodalDataItem
    from sglang.srt.multimodal.modality import Modality

    def pad(h: int, ln: int) -> list[int]:
        item = MultimodalDataItem(modality=Modality.IMAGE, offsets=[(0, ln - 1)])
        item.set_hash(h)
        return list(item.padding_sequence(ln))

    return pad


def sglang_publish(folder: Path) -> None:
    """Publish SGLang's default server arguments (the release path reads its ``serving`` and
    ``spec`` namespaces) for a small local model folder: a config.json, no weights, no tokenizer."""
    from sglang.srt.runtime_context import publish
    from sglang.srt.server_args import ServerArgs

    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(TINY_QWEN2))
    publish(ServerArgs(model_path=str(folder), device="cpu", skip_tokenizer_init=True), role="scheduler")


TINY_QWEN2 = {
    "architectures": ["Qwen2ForCausalLM"],
    "model_type": "qwen2",
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "num_hidden_layers": 2,
    "vocab_size": 152064,
    "max_position_embeddings": 32768,
    "rms_norm_eps": 1e-6,
    "rope_theta": 1000000.0,
    "torch_dtype": "bfloat16",
}


class FakeKV:
    """The allocator's ``kvcache``: nothing here reads or writes KV."""

    device = "cpu"


def sglang_served(reqs: list[Req], toks: list[list[int]], capacity: int, page: int) -> list[int] | None:
    import torch
    from sglang.srt.managers.schedule_batch import Req as SReq
    from sglang.srt.mem_cache.allocation import (
        alloc_paged_token_slots_decode,
        alloc_paged_token_slots_extend,
        alloc_req_slots,
        alloc_token_slots,
    )
    from sglang.srt.mem_cache.allocator import PagedTokenToKVPoolAllocator, TokenToKVPoolAllocator
    from sglang.srt.mem_cache.cache_init_params import CacheInitParams
    from sglang.srt.mem_cache.common import checkpoint_kv_cache, release_kv_cache
    from sglang.srt.mem_cache.memory_pool import ReqToTokenPool
    from sglang.srt.mem_cache.radix_cache import RadixCache
    from sglang.srt.sampling.sampling_params import SamplingParams

    if page == 1:
        alloc = TokenToKVPoolAllocator(capacity, torch.float16, "cpu", FakeKV(), False)
    else:
        alloc = PagedTokenToKVPoolAllocator(capacity, page, torch.float16, "cpu", FakeKV(), False)
    longest = max(len(t) + len(r.output) for t, r in zip(toks, reqs, strict=True))
    r2t = ReqToTokenPool(len(reqs) + 1, longest + page, "cpu", False)
    tree = RadixCache(
        CacheInitParams(disable=False, req_to_token_pool=r2t, token_to_kv_pool_allocator=alloc, page_size=page)
    )
    served = [0] * len(reqs)
    live: dict[int, Any] = {}
    try:
        for _t, _p, i, what in events(reqs):
            r = reqs[i]
            if what == 0:
                req = SReq(f"r{i}", "", array("q", toks[i]), SamplingParams(max_new_tokens=len(r.output)))
                req.init_next_round_input(tree)
                served[i] = req.prefix_len
                plen = len(toks[i])
                req.extend_end = plen
                req.lock = tree.lock(req.last_node)
                prefix = tree.prefix_device_indices(req)
                (row,) = alloc_req_slots(r2t, [req], tree)
                if page == 1:
                    out = alloc_token_slots(tree, plen - req.prefix_len)
                else:
                    last = prefix[-1:] if len(prefix) else torch.full((1,), -1, dtype=torch.int64)
                    out = alloc_paged_token_slots_extend(
                        tree_cache=tree,
                        prefix_lens=torch.tensor([req.prefix_len]),
                        prefix_lens_cpu=torch.tensor([req.prefix_len]),
                        seq_lens=torch.tensor([plen]),
                        seq_lens_cpu=torch.tensor([plen]),
                        last_loc=last.to(torch.int64),
                        extend_num_tokens=plen - req.prefix_len,
                    )
                r2t.write((row, slice(0, req.prefix_len)), prefix.to(torch.int32))
                r2t.write((row, slice(req.prefix_len, plen)), out.to(torch.int32))
                req.kv.kv_allocated_len = plen
                req.kv.kv_committed_len = plen
                checkpoint_kv_cache(req, tree)
                live[i] = req
            else:
                req = live.pop(i)
                row = req.kv.req_pool_idx
                for step, tok in enumerate(r.output):
                    req.output_ids.append(tok)
                    if step == len(r.output) - 1:
                        break  # the last token finishes the request: its KV is never computed
                    seq = req.kv.kv_committed_len
                    if page == 1:
                        loc = alloc_token_slots(tree, 1)
                    else:
                        loc = alloc_paged_token_slots_decode(
                            tree_cache=tree,
                            seq_lens=torch.tensor([seq + 1]),
                            seq_lens_cpu=torch.tensor([seq + 1]),
                            last_loc=r2t.req_to_token[row, seq - 1 : seq].to(torch.int64),
                        )
                    r2t.write((row, seq), loc.to(torch.int32))
                    req.kv.kv_allocated_len += 1
                    req.kv.kv_committed_len += 1
                req.finished_reason = _finish(len(r.output))
                release_kv_cache(req, tree, checkpoint=True)
    except RuntimeError as e:  # the engine's allocation failed: it would have queued a request
        if "out of memory" not in str(e).lower():
            raise
        return None
    return served


def _finish(n: int) -> Any:
    from sglang.srt.managers.schedule_batch import FINISH_LENGTH

    return FINISH_LENGTH(length=n)


# --- vLLM ----------------------------------------------------------------------------------------


def vllm_served(
    reqs: list[Req], toks: list[list[int]], items: list[list[tuple[int, int, int]]], num_blocks: int, bs: int
) -> list[int] | None:
    import torch
    from vllm.multimodal.inputs import MultiModalFeatureSpec, PlaceholderRange
    from vllm.sampling_params import SamplingParams
    from vllm.utils.hashing import get_hash_fn_by_name
    from vllm.v1.core.kv_cache_manager import KVCacheManager
    from vllm.v1.core.kv_cache_utils import get_request_block_hasher, init_none_hash
    from vllm.v1.kv_cache_interface import FullAttentionSpec, KVCacheConfig, KVCacheGroupSpec
    from vllm.v1.request import Request, RequestStatus

    hash_fn = get_hash_fn_by_name("sha256")  # CacheConfig.prefix_caching_hash_algo's default
    init_none_hash(hash_fn)
    spec = FullAttentionSpec(block_size=bs, num_kv_heads=1, head_size=8, dtype=torch.float16)
    config = KVCacheConfig(
        num_blocks=num_blocks, kv_cache_tensors=[], kv_cache_groups=[KVCacheGroupSpec(["layer.0"], spec)]
    )
    longest = max(len(t) + len(r.output) for t, r in zip(toks, reqs, strict=True))
    manager = KVCacheManager(
        config, max_model_len=longest + bs, scheduler_block_size=bs, hash_block_size=bs, enable_caching=True
    )
    hasher = get_request_block_hasher(bs, hash_fn)
    served = [0] * len(reqs)
    live: dict[int, Any] = {}
    for _t, _p, i, what in events(reqs):
        r = reqs[i]
        if what == 0:
            features = [
                MultiModalFeatureSpec(
                    data=None,
                    modality="image",
                    identifier=f"{h:016x}",
                    mm_position=PlaceholderRange(offset=start, length=ln),
                )
                for start, ln, h in items[i]
            ]
            req = Request(
                f"r{i}",
                list(toks[i]),
                SamplingParams(max_tokens=max(len(r.output), 1)),
                None,
                mm_features=features or None,
                block_hasher=hasher,
            )
            blocks, hit, _ = manager.get_computed_blocks(req)
            served[i] = hit
            got = manager.allocate_slots(
                req,
                len(toks[i]) - hit,
                num_new_computed_tokens=hit,
                new_computed_blocks=blocks,
                full_sequence_must_fit=True,
                has_scheduled_reqs=bool(live),
            )
            if got is None:
                return None  # the engine would have queued it
            req.status = RequestStatus.RUNNING
            req.num_computed_tokens = len(toks[i])
            live[i] = req
        else:
            req = live.pop(i)
            for step, tok in enumerate(r.output):
                req.append_output_token_ids(tok)
                if step == len(r.output) - 1:
                    break
                if manager.allocate_slots(req, 1) is None:
                    return None
                req.num_computed_tokens += 1
            manager.free(req)
    return served


# --- the file ------------------------------------------------------------------------------------


SCENARIOS: list[tuple[str, Any]] = [
    (
        "round-robin chats, shared system prompts, images",
        lambda: chats(1, 12, 5, overlap=False, systems=3, pool=5, image_p=0.5),
    ),
    ("concurrent chats", lambda: chats(2, 14, 4, overlap=True, systems=3, pool=6, image_p=0.5)),
    ("image-heavy round-robin chats", lambda: chats(3, 8, 4, overlap=False, systems=1, pool=3, image_p=1.0)),
    ("edges", lambda: edges(4)),
    ("exact shortfalls", lambda: exact(5)),
    ("duplicate blocks", lambda: duplicates(6)),
]
EXACT_CAPACITIES = {"exact shortfalls": {1: [20, 21, 22, 30, 31, 32], 16: [32, 48, 64]}}
SCALE = (100, 105, 110, 118, 125, 135, 150, 175, 200, 300, 1000)  # percent of the smallest capacity the engine runs at
PAGES = (1, 16)
BLOCK = 16


def floor(works: Any, lo: int, hi: int) -> int:
    """The smallest capacity in ``[lo, hi]`` at which ``works`` (the engine) runs every request."""
    assert works(hi), f"the engine cannot run these requests at {hi}"
    while lo < hi:
        mid = (lo + hi) // 2
        if works(mid):
            hi = mid
        else:
            lo = mid + 1
    return lo


def record(name: str, reqs: list[Req], pad: Any) -> dict[str, Any]:
    """One scenario: its requests, and what each engine served at capacities from the smallest it
    runs them at."""
    sg = [t for t, _ in expand(reqs, pad)]
    vl = expand(reqs, lambda h, ln: [IMAGE_TOKEN] * ln)
    vt = [t for t, _ in vl]
    vi = [it for _, it in vl]
    total = sum(len(t) + len(r.output) for t, r in zip(sg, reqs, strict=True))
    scen: dict[str, Any] = {"name": name, "requests": requests_json(reqs, pad), "sglang": [], "vllm": []}
    for page in PAGES:
        low = floor(lambda c, page=page: sglang_served(reqs, sg, c, page) is not None, 1, total + 64 * page)
        caps = sorted({-(-low * pct // 100) for pct in SCALE} | set(EXACT_CAPACITIES.get(name, {}).get(page, [])))
        for c in caps:
            got = sglang_served(reqs, sg, c, page)
            if got is None:
                print(f"{name}: SGLang page {page}, {c} tokens: skipped, the engine's allocation fails")
                continue
            print(f"{name}: SGLang page {page}, {c} tokens: {sum(got)} served")
            scen["sglang"].append({"capacity_tokens": c, "page_size": page, "served": got})
    low = floor(lambda b: vllm_served(reqs, vt, vi, b, BLOCK) is not None, 2, total // BLOCK + 64)
    for b in sorted({-(-low * pct // 100) for pct in SCALE}):
        got = vllm_served(reqs, vt, vi, b, BLOCK)
        assert got is not None
        print(f"{name}: vLLM {b} blocks: {sum(got)} served")
        scen["vllm"].append({"num_blocks": b, "block_size": BLOCK, "served": got})
    return scen


def requests_json(reqs: list[Req], pad: Any) -> list[dict[str, Any]]:
    """Each request as the tests rebuild it: its parent, then its own tokens, SGLang's and vLLM's."""
    out = []
    for r in reqs:
        sg_suffix = expand([Req(None, r.text, r.images)], pad)[0]
        vl_suffix = expand([Req(None, r.text, r.images)], lambda h, ln: [IMAGE_TOKEN] * ln)[0]
        out.append(
            {
                "parent": r.parent,
                "sglang": sg_suffix[0],
                "vllm": vl_suffix[0],
                "items": [[s, ln, f"{h:016x}"] for s, ln, h in vl_suffix[1]],
                "output": r.output,
                "arrive": r.arrive,
                "finish": r.finish,
            }
        )
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("sglang", type=Path, help="SGLang 0.5.23's wheel, unpacked")
    ap.add_argument("vllm", type=Path, help="vLLM 0.34.0's wheel, unpacked")
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args()
    sys.meta_path.insert(0, _Stub())
    sys.path[:0] = [str(args.sglang), str(args.vllm)]
    import importlib.metadata as md

    with tempfile.TemporaryDirectory() as tmp:
        sglang_publish(Path(tmp) / "model")
    pad = sglang_pad()
    doc: dict[str, Any] = {
        "made_by": "scripts/record_prefix_fixtures.py",
        "sglang": "0.5.23",
        "vllm": "0.34.0",
        "torch": md.version("torch"),
        "image_token": IMAGE_TOKEN,
        "scenarios": [],
    }
    doc["scenarios"] = [record(name, make(), pad) for name, make in SCENARIOS]
    args.out.write_text(json.dumps(doc, separators=(",", ":")) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
