"""SGLang's radix cache in front of the embedding cache, against SGLang 0.5.23's own scheduler functions.

tests/data/sglang_prefix_embedding.json is written by scripts/sglang_prefix_fixtures.py from the
sglang==0.5.23 wheel: ``_batch_encode_per_image_misses`` (its ``_item_overlap``) driven with each
request's ``extend_prefix_len`` from the radix replay, against ``MultiModalStaticCache`` at every size;
and a few items' pad runs from ``_compute_pad_values`` and ``padding_sequence``.
"""

from __future__ import annotations

import hashlib
import json
import random
from pathlib import Path
from typing import Any

import pytest

from mmpool_cli.caches.replay import replay
from mmpool_cli.caches.report import CacheItem
from mmpool_cli.engines.sglang import caches as rules
from mmpool_cli.engines.sglang import prefix, prompt_ids
from mmpool_cli.inputs.traffic.cache_request import CacheRequest, ModelShape, PrefixOptions
from mmpool_cli.inputs.traffic.prompts import Prompt, Timed, messages_of
from mmpool_cli.inputs.traffic.tokens import MARK, Estimated
from mmpool_cli.workload.families import family

FIXTURE = json.loads((Path(__file__).parents[2] / "data" / "sglang_prefix_embedding.json").read_text())
PATCH_DIM = {"qwen2.5-vl": 3 * 2 * 14 * 14, "qwen3-vl": 3 * 2 * 16 * 16}
RUNS = [(sc["name"], n) for sc in FIXTURE["scenarios"] for n in range(len(sc["runs"]))]


def request(sc: dict[str, Any], capacity: int | None, **kw: Any) -> CacheRequest:
    """The scenario as ``mmpool cache`` hands it to the engine: the items in order, each request's prompt."""
    fam = family(sc["family"])
    items: list[CacheItem] = []
    prompts: dict[str, Timed] = {}
    for n, r in enumerate(sc["requests"]):
        plain = []
        for m in r["messages"]:
            if not isinstance(m["content"], list):
                plain.append(m)
                continue
            parts = []
            for p in m["content"]:
                if p["type"] == "image_url":
                    nbytes = p["image"]["tokens"] * 4 * PATCH_DIM[sc["family"]] * 4
                    items.append(CacheItem(f"r{n}", "image", p["image"]["key"], nbytes, "image"))
                    parts.append({"type": "image_url", "image_url": {"url": "-"}})
                else:
                    parts.append(p)
            plain.append({"role": m["role"], "content": parts})
        prompts[f"r{n}"] = Timed(Prompt(messages_of(plain)), 2 * n, None)
    return CacheRequest(
        family=fam,
        settings=dict(fam.settings),
        items=items,
        source=sc["name"],
        shape=ModelShape(sc["hidden_size"], 3 if sc["family"] == "qwen3-vl" else None),
        environ={"SGLANG_VLM_CACHE_SIZE_MB": "100"},
        prompts=prompts,
        prefix=PrefixOptions(capacity_tokens=capacity, **kw),
    )


def scenario(name: str) -> dict[str, Any]:
    return next(sc for sc in FIXTURE["scenarios"] if sc["name"] == name)


@pytest.mark.parametrize(("name", "run"), RUNS)
def test_embedding_hits_equal_sglangs_scheduler_behind_the_radix_cache(name: str, run: int) -> None:
    sc = scenario(name)
    fix = sc["runs"][run]
    req = request(sc, fix["capacity_tokens"])
    groups = list(rules._requests(req.items))
    tokens = [rules._tokens(req, it) for it in req.items]
    got = prefix.replay(req, tokens, groups)
    built = prefix.build(req, tokens, groups)
    # the scheduler was driven with these prompts and prefixes: they are still mmpool's
    assert [len(r.tokens) for r in built.requests] == fix["prompt_len"]
    assert [got.served[f"r{n}"] for n in range(len(sc["requests"]))] == fix["extend_prefix_len"]
    assert [[[i, [list(o) for o in runs]] for i, runs in offs] for offs in built.offsets] == fix["offsets"]
    lk = rules.embedding_lookups(req, tokens, rules._width(req), got.covered).neutral()
    hits = [replay(lk, size)[0] for size in fix["embedding"]["sizes"]]
    assert hits == fix["embedding"]["hits"]


def test_the_fixture_has_requests_the_radix_cache_serves_items_of() -> None:
    # the scenarios prove something: at room for everything, earlier turns' images are never looked up,
    # and under pressure the radix cache evicts, so fewer are spared
    for sc in FIXTURE["scenarios"]:
        runs = sc["runs"]
        full = request(sc, runs[0]["capacity_tokens"])
        tight = request(sc, runs[-1]["capacity_tokens"])
        spared = []
        for req in (full, tight):
            groups = list(rules._requests(req.items))
            tokens = [rules._tokens(req, it) for it in req.items]
            spared.append(len(prefix.replay(req, tokens, groups).covered))
        assert spared[0] > spared[1]
        assert runs[-1]["embedding"]["hits"][-1] > runs[0]["embedding"]["hits"][-1]


@pytest.mark.parametrize("pad", FIXTURE["pads"], ids=lambda p: p["identity"][:8])
def test_pad_runs_are_sglangs(pad: dict[str, Any]) -> None:
    values = prefix.pad_values(bytes.fromhex(pad["identity"]))
    assert prefix.padding(values, pad["length"]) == pad["padding"]


def test_an_items_identity_is_the_digest_of_its_content_key() -> None:
    item = CacheItem("r0", "image", "a1", 1, "image")
    assert prefix._identity(item, 0) == hashlib.sha256(b"a1").digest()
    assert prefix._identity(CacheItem("r0", "image", None, 1), 3) != prefix._identity(
        CacheItem("r1", "image", None, 1), 4
    )


def test_disable_radix_cache_looks_every_item_up() -> None:
    sc = FIXTURE["scenarios"][0]
    req = request(sc, None, disabled=True)
    report = rules.caches(req)
    emb, radix = report.caches[0], report.caches[2]
    assert (radix.name, radix.size_bytes, radix.hits) == ("prefix", 0, 0)
    assert emb.extra["served_by_prefix"] == 0
    assert "prefix-cache-off" in [n.code for n in report.notes]
    # every item looked up: as many lookups as with no prompts at all
    bare = rules.caches(request(sc, None, disabled=True).__class__(**{**request(sc, None).__dict__, "prompts": {}}))
    assert emb.counted_lookups == bare.caches[0].counted_lookups


def test_the_report_gives_the_prefix_cache_and_what_it_spared_the_embedding_cache() -> None:
    sc = FIXTURE["scenarios"][0]
    report = rules.caches(request(sc, None))
    names = [c.name for c in report.caches]
    assert names == ["embedding", "preprocess", "prefix"]
    emb, pre, radix = report.caches
    data = radix.to_data()
    assert data["unit"] == "tokens" and data["size_tokens"] == radix.curve.steps[-1][0]
    assert data["tokens_estimated"] is True and data["requests_replayed"] == len(sc["requests"])
    assert [p["size_tokens"] for p in data["curve"]] == sorted(p["size_tokens"] for p in data["curve"])
    assert emb.extra["served_by_prefix"] > 0
    # the preprocess cache sees every item, whatever the radix cache serves
    bare = rules.caches(CacheRequest(**{**request(sc, None).__dict__, "prompts": {}}))
    assert pre.curve == bare.caches[1].curve
    codes = [n.code for n in report.notes]
    assert "prefix-tokens-estimated" in codes and "prefix-capacity-assumed" in codes


def test_the_replay_is_compared_with_the_servers_cached_tokens() -> None:
    sc = FIXTURE["scenarios"][0]
    req = request(sc, None)
    groups = list(rules._requests(req.items))
    tokens = [rules._tokens(req, it) for it in req.items]
    served = prefix.replay(req, tokens, groups).served
    built = prefix.build(req, tokens, groups)
    built.estimated = False
    agree = prefix._check(built.__class__(**{**built.__dict__, "cached": list(served.values())}), list(served.values()))
    assert [n.code for n in agree] == ["prefix-replay-matches"]
    told = list(served.values())
    told[2] += 1
    differ = prefix._check(built.__class__(**{**built.__dict__, "cached": told}), list(served.values()))
    assert [n.code for n in differ] == ["prefix-replay-differs"]
    assert "request r2:" in differ[0].message
    # estimated tokens are not compared
    built.estimated = True
    assert prefix._check(built.__class__(**{**built.__dict__, "cached": told}), list(served.values())) == []


WORDS = ["a", "b c", " x", "12", ",.!", "\n", "<|im_start|>", "<|im_end|>", "héllo", "\x00", MARK, "<|vision_start|>"]


def random_traffic(seed: int, n: int) -> tuple[list[CacheItem], dict[str, Timed]]:
    """Interleaved chats re-sending their turns, items keyed, unkeyed, shared or of another kind than
    the prompt places, outputs and server counts here and there, text with ChatML's marks and NULs."""
    rng = random.Random(seed)
    items: list[CacheItem] = []
    prompts: dict[str, Timed] = {}
    chats: dict[int, list[dict[str, Any]]] = {}

    def say() -> str:
        return "".join(rng.choice(WORDS) for _ in range(rng.randrange(0, 5)))

    for i in range(n):
        c = rng.randrange(10)
        msgs = chats.get(c) or ([{"role": "system", "content": say()}] if rng.random() < 0.5 else [])
        content: Any = []
        for _ in range(rng.randrange(0, 3)):
            content += [{"type": "image_url", "image_url": {"url": "-"}}, {"type": "text", "text": say()}]
        if rng.random() < 0.2:
            content = say()
        msgs = [*msgs, {"role": "user", "content": content}]
        name = f"r{i}"
        k = 0
        for m in msgs:
            for p in m["content"] if isinstance(m["content"], list) else []:
                if p["type"] == "image_url":
                    kind = "image" if rng.random() < 0.98 else "video"
                    items.append(CacheItem(name, kind, rng.choice([f"i{c}-{k}", None, f"s{k % 3}"]), 1000, kind))
                    k += 1
        if k == 0:
            items.append(CacheItem(name, "image", "x", 1000, "image"))  # an item its prompt does not place
        output = rng.choice([None, 0, 1, 5])
        prompt = Prompt(messages_of(json.loads(json.dumps(msgs))), None, output, None, rng.choice([None, 3]))
        prompts[name] = Timed(prompt, 2 * i, rng.choice([None, 2 * i + 1]))
        next_turn = [*msgs, {"role": "assistant", "content": say()}]
        chats[c] = next_turn if rng.random() < 0.9 else []
    return items, prompts


class WholeText(Estimated):
    """The estimate, tokenizing each prompt's whole rendering (``tokens_of``) as other tokenizers do."""


@pytest.mark.parametrize("seed", range(6))
def test_prompts_built_message_by_message_are_those_of_the_whole_rendering(
    seed: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    items, prompts = random_traffic(seed, 300)
    groups = list(prefix.requests_of(items))
    tokens = [random.Random(seed).randrange(0, 40) for _ in items]
    for name in ("qwen2.5-vl", "qwen3-vl"):
        fam = family(name)
        req = CacheRequest(fam, dict(fam.settings), items, "t", ModelShape(3584), prompts=prompts)
        fast = prefix.build(req, tokens, groups)
        monkeypatch.setattr(prefix, "tokenizer_for", lambda _req: WholeText())
        whole = prefix.build(req, tokens, groups)
        monkeypatch.undo()
        assert [list(r.tokens) for r in fast.requests] == [list(r.tokens) for r in whole.requests]
        assert [(r.output, r.arrive, r.finish) for r in fast.requests] == [
            (r.output, r.arrive, r.finish) for r in whole.requests
        ]
        assert (fast.names, fast.offsets, fast.cached, fast.not_placed) == (
            whole.names,
            whole.offsets,
            whole.cached,
            whole.not_placed,
        )
        assert len(fast.requests) > 30 and fast.not_placed > 0


def same_built(a: prefix.Built, b: prefix.Built) -> None:
    assert [(type(r.tokens), list(r.tokens), r.output, r.extra, r.arrive, r.finish) for r in a.requests] == [
        (type(r.tokens), list(r.tokens), r.output, r.extra, r.arrive, r.finish) for r in b.requests
    ]
    fields = ("names", "offsets", "cached", "not_placed", "estimated", "tokenizer", "timed", "outputs", "prompt_tokens")
    assert [getattr(a, f) for f in fields] == [getattr(b, f) for f in fields]


@pytest.mark.skipif(prompt_ids.FAST is None, reason="the compiled kernel is not built")
@pytest.mark.parametrize("seed", range(4))
def test_the_compiled_prompts_are_the_pythons(seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    items, prompts = random_traffic(seed, 300)
    groups = list(prefix.requests_of(items))
    tokens = [random.Random(seed).randrange(0, 40) for _ in items]
    reqs = [
        (CacheRequest(family(n), dict(family(n).settings), items, "t", ModelShape(3584), prompts=prompts), t)
        for n in ("qwen2.5-vl", "qwen3-vl")
        for t in (Estimated, WholeText)
    ]
    for sc in FIXTURE["scenarios"]:  # the engine's own prompts
        req = request(sc, None)
        reqs.append((req, Estimated))
    for req, tok in reqs:
        monkeypatch.setattr(prefix, "tokenizer_for", lambda _req, tok=tok: tok())
        g = groups if req.items is items else list(prefix.requests_of(req.items))
        t = tokens if req.items is items else [rules._tokens(req, it) for it in req.items]
        fast = prefix.build(req, t, g)
        monkeypatch.setattr(prompt_ids, "FAST", None)
        same_built(fast, prefix.build(req, t, g))
        monkeypatch.undo()
        assert fast.requests and (fast.not_placed > 0 or req.items is not items)


@pytest.mark.parametrize("length", [0, 1, 3, 4, 5, 16, 1023])
def test_an_items_run_is_its_pad_values_padded_between_the_wrap(length: int) -> None:
    wrap = ([7, 8], [9])
    for index, key in enumerate(["img-a", "https://x/1.png", None]):
        item = CacheItem("r", "image", key, 1, "image")
        want = [7, 8, *prefix.padding(prefix.pad_values(prefix._identity(item, index)), length), 9]
        assert list(prefix._run(wrap, key if key is not None else f"unkeyed:{index}", length)) == want
