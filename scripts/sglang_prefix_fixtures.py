"""Make tests/data/sglang_prefix_embedding.json: SGLang 0.5.23's embedding-cache lookups on multi-turn
chats behind the radix cache, driven by SGLang's own scheduler functions.

    pip download --no-deps sglang==0.5.23 -d /tmp/caches-wheels && cd /tmp/caches-wheels && unzip -q sglang-*.whl -d sg
    PYTHONPATH=. python scripts/sglang_prefix_fixtures.py /tmp/caches-wheels/sg

Runs with CPU torch, from a checkout (it imports mmpool_cli and scripts/sglang_cache_fixtures.py).
For each scenario (chats whose turns repeat the earlier turns, a system prompt shared by every chat,
turns of several images, images repeated across chats) and each KV capacity (room for everything,
and capacities under which the radix cache evicts):

* the prompts are the tokens mmpool gives SGLang's radix cache (``engines/sglang/prefix.py``: the
  chat template, each image's run padded with its hash-derived sentinels), and each request's
  ``extend_prefix_len`` is what mmpool's radix replay serves it at that capacity (the replay's own
  agreement with SGLang's ``RadixCache`` is tests/caches' business);
* SGLang's own ``_batch_encode_per_image_misses`` (with its ``_item_overlap``), executed from the
  wheel's ``managers/mm_schedule.py`` as ``scripts/sglang_cache_fixtures.py`` loads it, is then
  driven request by request with a ``PerImageRequestInfo`` of that ``extend_prefix_len``, the
  computed part's length and the items' real offsets, against the wheel's own
  ``MultiModalStaticCache`` at every size from 0 to the size that holds every item;
* the JSON holds the scenario, each request's ``extend_prefix_len`` and prompt length, each item's
  offsets, and the hits at every size. tests/engines/sglang/test_prefix.py checks that mmpool's
  embedding-cache replay behind its radix replay makes exactly those hits.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from sglang_cache_fixtures import Item, Wheel  # noqa: E402

from mmpool_cli.caches.report import CacheItem  # noqa: E402
from mmpool_cli.engines.sglang import caches as rules  # noqa: E402
from mmpool_cli.engines.sglang import prefix  # noqa: E402
from mmpool_cli.inputs.traffic.cache_request import CacheRequest, ModelShape, PrefixOptions  # noqa: E402
from mmpool_cli.inputs.traffic.prompts import Prompt, Timed, messages_of  # noqa: E402
from mmpool_cli.workload.families import family  # noqa: E402

OUT = Path(__file__).resolve().parent.parent / "tests" / "data" / "sglang_prefix_embedding.json"
PATCH_DIM = {"qwen2.5-vl": 3 * 2 * 14 * 14, "qwen3-vl": 3 * 2 * 16 * 16}
HIDDEN = 2
SYSTEM = "You answer questions about shipping documents. Be brief."


def image(key: str, tokens: int) -> dict[str, Any]:
    return {"key": key, "tokens": tokens}


def user(text: str, *images: dict[str, Any]) -> dict[str, Any]:
    media = [{"type": "image_url", "image": im} for im in images]
    return {"role": "user", "content": [*media, {"type": "text", "text": text}]}


def scenarios() -> list[dict[str, Any]]:
    """Chats whose turns repeat every earlier turn, interleaved; images repeated within and across chats."""
    a, b, c, d, e = image("a1", 64), image("b2", 36), image("c3", 100), image("d4", 16), image("e5", 49)
    chats = [
        [
            user("What is on this label?", a),
            "A barcode and an address.",
            user("And here?", b, c),
            "Two invoices.",
            user("Is the first label on either invoice?", a),
        ],
        [
            user("Read this.", c),
            "An invoice for 40 crates.",
            user("Compare with these.", d, a),
            "They match.",
            user("Which is oldest?"),
        ],
        [user("Describe both.", e, b), "A pallet and a truck.", user("Again, the pallet?", e)],
    ]
    out = []
    for fam in ("qwen2.5-vl", "qwen3-vl"):
        requests = []
        for turn in range(0, 5, 2):  # turn 1 of every chat, then turn 2 of every chat, ...
            for n, chat in enumerate(chats):
                if turn < len(chat):
                    msgs: list[dict[str, Any]] = [{"role": "system", "content": SYSTEM}]
                    for k, m in enumerate(chat[: turn + 1]):
                        msgs.append(m if k % 2 == 0 else {"role": "assistant", "content": m})
                    requests.append({"chat": n, "messages": msgs})
        out.append({"name": f"{fam} interleaved multi-turn chats", "family": fam, "requests": requests})
    return out


def cache_request(sc: dict[str, Any], capacity: int | None) -> CacheRequest:
    """The scenario as ``mmpool cache`` hands it to the engine: the items in order, each request's prompt."""
    fam = family(sc["family"])
    items: list[CacheItem] = []
    prompts: dict[str, Timed] = {}
    for n, r in enumerate(sc["requests"]):
        plain = []
        for m in r["messages"]:
            if isinstance(m["content"], list):
                parts = []
                for p in m["content"]:
                    if p["type"] == "image_url":
                        im = p["image"]
                        nbytes = im["tokens"] * 4 * PATCH_DIM[sc["family"]] * 4
                        items.append(CacheItem(f"r{n}", "image", im["key"], nbytes, "image"))
                        parts.append({"type": "image_url", "image_url": {"url": "-"}})
                    else:
                        parts.append(p)
                plain.append({"role": m["role"], "content": parts})
            else:
                plain.append(m)
        prompts[f"r{n}"] = Timed(Prompt(messages_of(plain)), 2 * n, None)
    return CacheRequest(
        family=fam,
        settings=dict(fam.settings),
        items=items,
        source=sc["name"],
        shape=ModelShape(HIDDEN, 3 if sc["family"] == "qwen3-vl" else None),
        environ={"SGLANG_VLM_CACHE_SIZE_MB": "100"},
        prompts=prompts,
        prefix=PrefixOptions(capacity_tokens=capacity),
    )


def sglang_hits(w: Wheel, built: prefix.Built, served: list[int], req: CacheRequest, size: int) -> int:
    """SGLang's embedding cache of ``size`` bytes, driven by mm_schedule request by request."""
    import torch

    width = rules._width(req)
    tokens = [rules._tokens(req, it) for it in req.items]
    cache = w.mm.MultiModalStaticCache(size)
    w.sched["embedding_cache"] = cache
    hits = 0
    phase = [True]
    real_get_single = cache.get_single

    def get_single(h: int) -> Any:
        nonlocal hits
        got = real_get_single(h)
        hits += got is not None and phase[0]  # the read-back after a set is not a lookup
        return got

    cache.get_single = get_single

    def encode(batch: list[Item]) -> torch.Tensor:  # the ViT: one row per token, the model's width
        phase[0] = False
        return torch.zeros(sum(sum(e - s + 1 for s, e in i.offsets) for i in batch), width, dtype=torch.bfloat16)

    for r, extend_prefix_len, offs in zip(built.requests, served, built.offsets, strict=True):
        items = [Item(hash=_hash(req.items[i].key), offsets=runs) for i, runs in offs]
        assert all(tokens[i] == runs[0][1] - runs[0][0] + 1 for i, runs in offs)
        phase[0] = True
        info = w.sched["PerImageRequestInfo"](
            0, items, [o for i in items for o in i.offsets], extend_prefix_len, len(r.tokens) - extend_prefix_len
        )
        w.sched["_batch_encode_per_image_misses"](encode, [info], "cpu")
    return hits


def _hash(key: str | None) -> int:
    assert key is not None
    return int(key.encode().hex(), 16) & ((1 << 62) - 1)


def main() -> None:
    root = Path(sys.argv[1] if len(sys.argv) > 1 else "/tmp/caches-wheels/sg")
    w = Wheel(root)
    data = []
    for sc in scenarios():
        req0 = cache_request(sc, None)
        groups = list(rules._requests(req0.items))
        tokens = [rules._tokens(req0, it) for it in req0.items]
        built0 = prefix.build(req0, tokens, groups)
        everything = built0.prompt_tokens
        largest = max(len(r.tokens) for r in built0.requests)  # the least every request runs in
        runs = []
        for capacity in (everything, (largest + everything) // 2, largest + (everything - largest) // 4, largest):
            req = cache_request(sc, capacity)
            built = prefix.build(req, tokens, groups)
            served = prefix.prefix.replay(built.requests, prefix.prefix.Radix(capacity))
            width = rules._width(req)
            unit = width * 2
            total = sum(tokens) * unit
            sizes = sorted({s for k in range(total // unit + 2) for s in (k * unit, max(0, k * unit - 1))})
            hits = [sglang_hits(w, built, served, req, s) for s in sizes]
            runs.append(
                {
                    "capacity_tokens": capacity,
                    "extend_prefix_len": served,
                    "prompt_len": [len(r.tokens) for r in built.requests],
                    "offsets": [[[i, [list(o) for o in rr]] for i, rr in offs] for offs in built.offsets],
                    "embedding": {"sizes": sizes, "hits": hits},
                }
            )
            print(f"{sc['name']} at {capacity} tokens: {len(sizes)} sizes, {hits[-1]} hits at most", file=sys.stderr)
        data.append({**sc, "hidden_size": HIDDEN, "runs": runs})
    fixture = {"sglang": "0.5.23", "pads": pads(root), "scenarios": data}
    OUT.write_text(json.dumps(fixture, separators=(",", ":")) + "\n")


def pads(root: Path) -> list[dict[str, Any]]:
    """A few items' pad runs as SGLang writes them: ``_compute_pad_values`` of the item's 32-byte identity
    and ``MultimodalDataItem.padding_sequence``, executed from the wheel's ``managers/schedule_batch.py``."""
    import ast
    import hashlib

    path = root / "sglang" / "srt" / "managers" / "schedule_batch.py"
    tree = ast.parse(path.read_text())
    consts = [
        n
        for n in tree.body
        if isinstance(n, ast.Assign)
        and any(isinstance(t, ast.Name) and t.id.startswith(("MM_PAD", "_MM_")) for t in n.targets)
    ]
    fn = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "_compute_pad_values"]
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "MultimodalDataItem")
    wanted = ("padding_sequence", "padding_values")
    methods = [n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name in wanted]
    holder = ast.ClassDef("Padded", [], [], [*methods], [], type_params=[])
    ns: dict[str, Any] = {"hashlib": hashlib, "Tuple": tuple, "List": list}
    exec(compile(ast.fix_missing_locations(ast.Module([*consts, *fn, holder], [])), str(path), "exec"), ns)
    out = []
    for key, length in (("a1", 9), ("data:0123", 4), ("url:https://x/y.png", 3)):
        identity = hashlib.sha256(key.encode()).digest()
        item = ns["Padded"]()
        item.pad_values = ns["_compute_pad_values"](identity)
        item.pad_value = item.pad_values[0]
        out.append({"identity": identity.hex(), "length": length, "padding": item.padding_sequence(length)})
    return out


if __name__ == "__main__":
    main()
