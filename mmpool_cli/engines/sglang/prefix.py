"""SGLang 0.5.23's radix (prefix) cache over the traffic's prompts, and what it leaves the embedding cache.

* **The prompts as SGLang sees them**: the chat rendered by the model's template and tokenized by its
  tokenizer (``inputs.traffic.tokens``; estimated where none loads, and said so), each image's
  placeholder expanded to its tokens, each padded with the four sentinels SGLang derives from the
  item's identity (``managers/schedule_batch.py`` ``_compute_pad_values``, repeated over the run by
  ``padding_sequence``): so a chat's next turn matches its earlier turns, images included.
* **The replay**: the neutral ``caches.prefix`` replay of SGLang's ``RadixCache`` at the launch's KV
  capacity (``--max-total-tokens``; ``--page-size``), off under ``--disable-radix-cache``. Each
  request's served tokens are its ``extend_prefix_len``.
* **What the embedding cache sees**: ``managers/mm_schedule.py`` looks an item up only where it overlaps
  the part of the prompt computed, ``[extend_prefix_len, len(prompt))`` (``_item_overlap``, used in
  ``_batch_encode_per_image_misses``): an item wholly inside the served prefix is never looked up.
  A prompt is taken as prefilled in one chunk (``--chunked-prefill-size`` splits are not replayed).

Pure core: standard library only.
"""

from __future__ import annotations

import hashlib
import struct
from array import array
from collections.abc import Iterator, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from functools import cached_property

from mmpool_cli.caches import prefix
from mmpool_cli.caches.curve import Curve
from mmpool_cli.caches.replay import REPLAYED
from mmpool_cli.caches.report import CacheItem, CacheNote, CacheResult, Recommendation, hits_needed
from mmpool_cli.engines.sglang.prompt_ids import place_all
from mmpool_cli.inputs.traffic.cache_request import CacheRequest
from mmpool_cli.inputs.traffic.prompts import Timed
from mmpool_cli.inputs.traffic.tokens import Chat, Estimated, Memo, Tokenizer, load, prompt_segments, try_load

MM_PAD_SHIFT_VALUE = 1_000_000  # schedule_batch.py: pads start above every text token id
_MM_WIDE_PAD_TAG = b"sglang-mm-wide-pad-v1"
_MM_WIDE_PAD_MASK = (1 << 62) - 1
_MM_IDENTITY_BYTES = 32
_WORDS = struct.Struct(">4Q")  # the identity's four big-endian 8-byte words
CURVE_POINTS = 24
_ITEM_TEXT = {
    "image": "<|vision_start|><|image_pad|><|vision_end|>",
    "video": "<|vision_start|><|video_pad|><|vision_end|>",
}
WRAP = ("<|vision_start|>", "<|vision_end|>")  # around each item's pad run (its offsets: the run only)
# the families' chat templates: Qwen2-VL and Qwen2.5-VL add a system message when the chat has none
CHATS = {
    "qwen2-vl": Chat("You are a helpful assistant.", _ITEM_TEXT),
    "qwen2.5-vl": Chat("You are a helpful assistant.", _ITEM_TEXT),
    "qwen3-vl": Chat(None, _ITEM_TEXT),
}


def requests_of(items: list[CacheItem]) -> Iterator[list[tuple[int, CacheItem]]]:
    """The items of each request, in the order the requests came (a request's items come together)."""
    group: list[tuple[int, CacheItem]] = []
    for i, item in enumerate(items):
        if group and group[0][1].request != item.request:
            yield group
            group = []
        group.append((i, item))
    if group:
        yield group


def pad_values(identity: bytes) -> tuple[int, ...]:
    """The four pad sentinels of an item (``_compute_pad_values`` of SGLang 0.5.23)."""
    a, b, c, d = _WORDS.unpack(hashlib.sha256(_MM_WIDE_PAD_TAG + identity).digest()[:_MM_IDENTITY_BYTES])
    m, v = _MM_WIDE_PAD_MASK, MM_PAD_SHIFT_VALUE
    return (v + (a & m), v + (b & m), v + (c & m), v + (d & m))


def padding(values: tuple[int, ...], length: int) -> list[int]:
    """``MultimodalDataItem.padding_sequence``: the sentinels repeated over ``length`` tokens."""
    repeats, remainder = divmod(length, len(values))
    return list(values) * repeats + list(values[:remainder])


def overlaps(offsets: Sequence[tuple[int, int]], chunk_start: int, chunk_end: int) -> bool:
    """Whether ``_item_overlap`` finds the item in ``[chunk_start, chunk_end)`` (inclusive offsets)."""
    return any(end >= chunk_start and start < chunk_end for start, end in offsets)


@dataclass
class Built:
    """The prompts replayed: one prefix request per request placed, and its items' offsets."""

    requests: list[prefix.PrefixRequest] = field(default_factory=list)
    names: list[str] = field(default_factory=list)  # the request each one is
    offsets: list[list[tuple[int, list[tuple[int, int]]]]] = field(default_factory=list)  # (item index, runs)
    cached: list[int | None] = field(default_factory=list)  # the server's cached_tokens, where given
    not_placed: int = 0  # requests whose prompt is missing or does not place their items
    estimated: bool = True
    tokenizer: str = "estimate"
    timed: bool = False  # lifetimes from the log's receipts and Finish lines
    outputs: int = 0  # requests whose output length the log gives
    prompt_tokens: int = 0

    @cached_property
    def last_ends(self) -> list[list[tuple[int, int]]]:
        """Each request's items and the last offset of their runs, made once for every replay: an item
        overlaps the part computed, ``[served, len)``, exactly where a run ends at or past ``served``."""
        return [[(i, r[0][1] if len(r) == 1 else max(e for _, e in r)) for i, r in offs] for offs in self.offsets]

    @cached_property
    def order(self) -> list[tuple[int, int, int, int]]:
        """The requests' admissions and releases, made once for every replay."""
        return prefix.events(self.requests)


@dataclass
class PrefixReplay:
    """What the radix cache served, the items it covered (never looked up), its report entry and findings."""

    served: dict[str, int]
    covered: set[int]  # indices into the request's items
    result: CacheResult
    notes: list[CacheNote]
    items_served: int = 0  # the lookups it spared: its covered items, one per distinct item of a request


def tokenizer_for(req: CacheRequest) -> Tokenizer:
    """``--tokenizer-path`` (an error where it has none), else the model folder's, else the estimate."""
    got = load(req.prefix.tokenizer) if req.prefix.tokenizer is not None else None
    if got is None and req.prefix.tokenizer is None and req.prefix.model_dir is not None:
        got = try_load(req.prefix.model_dir)
    return got if got is not None else Estimated()


def build(req: CacheRequest, item_tokens: Sequence[int], groups: Sequence[list[tuple[int, CacheItem]]]) -> Built:
    """Each request's prompt tokens as SGLang pads them, in the order the requests came."""
    with prefix.no_collection():
        return _build(req, item_tokens, groups)


def _build(req: CacheRequest, item_tokens: Sequence[int], groups: Sequence[list[tuple[int, CacheItem]]]) -> Built:
    chat = CHATS.get(req.family.name, CHATS["qwen3-vl"])
    tok = tokenizer_for(req)
    out = Built(estimated=tok.estimated, tokenizer=tok.name)
    wrap = (tok.encode(WRAP[0]), tok.encode(WRAP[1]))
    memo = Memo(tok)
    times = [req.prompts.get(g[0][1].request) for g in groups]
    out.timed = all(t is not None and t.finish_ns is not None for t in times)
    prompts = [None if t is None else t.prompt for t in times]

    def make(item: CacheItem, index: int) -> array[int]:  # an item's run, wrapped: it repeats turn after turn
        return _run(wrap, item.key if item.key is not None else f"unkeyed:{index}", item_tokens[index])

    fresh = total = 0
    requests, names, offsets, cached = out.requests, out.names, out.offsets, out.cached
    placed = place_all(prompts, lambda p: prompt_segments(p, tok, chat, memo), groups, item_tokens, make, len(wrap[0]))
    for n, (group, timed, prompt, got) in enumerate(zip(groups, times, prompts, placed, strict=True)):
        if got is None or timed is None or prompt is None:
            out.not_placed += 1  # no prompt, or its items are not the request's
            continue
        ids, offs = got
        output: list[int] = []
        if prompt.output_tokens:
            out.outputs += 1
            output = list(range(-fresh - 1, -fresh - 1 - prompt.output_tokens, -1))  # never matched
            fresh += prompt.output_tokens
        arrive, finish = _times(timed, n, out.timed)
        requests.append(prefix.PrefixRequest(ids, output, (), arrive, finish))
        names.append(group[0][1].request)
        offsets.append(offs)
        cached.append(prompt.cached_tokens)
        total += len(ids)
    out.prompt_tokens = total
    return out


def _run(wrap: tuple[list[int], list[int]], key: str, length: int) -> array[int]:
    """An item's run: ``padding(pad_values(...), length)`` (of its key's digest) between the wrap's ids."""
    values = array("q", pad_values(hashlib.sha256(key.encode()).digest()))
    repeats, remainder = divmod(length, len(values))
    run = array("q", wrap[0])
    run += values * repeats
    run += values[:remainder]
    run.extend(wrap[1])
    return run


def _identity(item: CacheItem, index: int) -> bytes:
    """An item's 32-byte identity: the digest of its content key (an item without one is its own)."""
    key = item.key if item.key is not None else f"unkeyed:{index}"
    return hashlib.sha256(key.encode()).digest()


def _times(timed: Timed, n: int, from_log: bool) -> tuple[int, int]:
    if from_log:
        assert timed.finish_ns is not None
        return timed.arrive_ns, max(timed.arrive_ns, timed.finish_ns)
    return 2 * n, 2 * n + 1  # one at a time: each released before the next is admitted


def replay(
    req: CacheRequest,
    item_tokens: Sequence[int],
    groups: Sequence[list[tuple[int, CacheItem]]],
    kv_cell_bytes: int | None = None,
) -> PrefixReplay:
    """The radix cache over ``req``'s prompts at the launch's capacity, and the curve of its served tokens."""
    built = build(req, item_tokens, groups)
    notes: list[CacheNote] = []
    total = built.prompt_tokens + sum(len(r.output) for r in built.requests)
    page = max(1, req.prefix.page_size)
    unbounded = -(-max(total, 1) // page) * page
    capacity = req.prefix.capacity_tokens
    origin = f"--max-total-tokens {capacity}" if capacity is not None else ""
    if capacity is None:
        capacity, origin = unbounded, "not given: room for every token (nothing evicted)"
    if req.prefix.capacity_tokens is None and not req.prefix.disabled:
        notes.append(
            CacheNote(
                "prefix-capacity-assumed",
                "warning",
                f"the KV capacity is not given: SGLang's radix cache replayed with room for all {total:,} tokens, "
                "nothing evicted (the most it can serve); give --max-total-tokens N (SGLang prints "
                "max_total_num_tokens at start-up)",
            )
        )
    if req.prefix.disabled:
        origin = "--disable-radix-cache: off"
        off = "--disable-radix-cache: SGLang's radix cache serves nothing, and every item is looked up"
        notes.append(CacheNote("prefix-cache-off", "info", off))
    least = least_capacity(built, page)
    at = [0] * len(built.requests) if req.prefix.disabled else served_at(built, capacity, page)
    result_notes_extra = []
    if not req.prefix.disabled and capacity < least:
        result_notes_extra.append(
            f"a request needs {least:,} tokens, more than the capacity: SGLang would refuse or hold it; the "
            "replay runs it over the capacity"
        )
    covered = covered_by(built, at)
    span = max(unbounded - least, 0)
    points = sorted({least + span * k // CURVE_POINTS // page * page for k in range(CURVE_POINTS + 1)} | {capacity})
    sums = prefix.curve(built.requests, prefix.Radix, points, page_size=page) if built.requests else [0] * len(points)
    steps = tuple((p, s, s) for p, s in zip(points, sums, strict=True))
    curve = Curve(built.prompt_tokens, steps)
    size = 0 if req.prefix.disabled else capacity
    need = hits_needed(curve, req.target)
    rec = None
    if curve.unbounded[0] > 0:
        smallest = next(p for p, s, _ in steps if s >= need)
        cost = {"kv_tokens": smallest}
        if kv_cell_bytes:
            cost["gpu_bytes_per_rank"] = smallest * kv_cell_bytes
        rec = Recommendation(smallest, f"--max-total-tokens {smallest}", cost)
    result_notes = [_assumed(built, page), *result_notes_extra]
    if built.estimated and not req.prefix.disabled:
        notes.append(
            CacheNote(
                "prefix-tokens-estimated",
                "warning",
                "no tokenizer loaded (give --tokenizer-path DIR, or a --model folder with one): the prompts' text "
                "tokens are estimated (one per word, number group or punctuation run), so the prefix cache's "
                "tokens are estimates; which items it serves is not",
            )
        )
    notes.extend(not_replayed(built, len(groups)))
    notes.extend(_check(built, at))
    if built.estimated and any(c is not None for c in built.cached):
        result_notes.append("the server's cached_tokens are not compared: the replay's tokens are estimated")
    result = CacheResult(
        name="prefix",
        engine="sglang",
        title="prefix cache (radix, GPU KV)",
        size_bytes=size,
        size_origin=origin,
        curve=curve,
        work_unit="prompt tokens",
        target=req.target,
        recommendation=rec,
        notes=result_notes,
        method=REPLAYED,
        unit="tokens",
        extra={
            "tokens_estimated": built.estimated,
            "tokenizer": built.tokenizer,
            "requests_replayed": len(built.requests),
            "requests_not_replayed": built.not_placed,
            "items_served": len(covered),  # every item inside a served prefix, repeats in a request too
            "lifetimes": "log" if built.timed else "one at a time",
        },
    )
    return PrefixReplay(dict(zip(built.names, at, strict=True)), covered, result, notes, spared(groups, covered))


def not_replayed(built: Built, requests: int) -> list[CacheNote]:
    """``prefix-not-replayed`` where requests carry no prompt their items can be placed in."""
    if not built.not_placed:
        return []
    return [
        CacheNote(
            "prefix-not-replayed",
            "warning",
            f"{built.not_placed:,} of {requests:,} requests carry no prompt mmpool can place their items in "
            "(a log without messages or with cut text): the prefix cache serves them nothing",
        )
    ]


def served_at(built: Built, capacity: int, page: int) -> list[int]:
    """Each replayed request's prompt tokens the radix cache of ``capacity`` tokens serves at its admission."""
    return prefix.replay(built.requests, prefix.Radix(capacity, page), built.order) if built.requests else []


def least_capacity(built: Built, page: int) -> int:
    """The least capacity every request runs in (its prompt and output), in whole pages."""
    return -(-max((len(r.tokens) + len(r.output) for r in built.requests), default=0) // page) * page


def covered_by(built: Built, served: Sequence[int]) -> set[int]:
    """The items (indices into the request's items) wholly inside each request's served prefix: never looked up."""
    covered: set[int] = set()
    for n, items in zip(served, built.last_ends, strict=True):  # overlaps(runs, n, 1 << 62), run by run
        covered.update(index for index, end in items if end < n)
    return covered


def spared(groups: Sequence[list[tuple[int, CacheItem]]], covered: AbstractSet[int]) -> int:
    """The embedding cache's lookups the radix cache spared: one per distinct covered item of a request."""
    return sum(len({(it.key if it.key is not None else i) for i, it in g if i in covered}) for g in groups)


def prefix_note(served: int | None) -> str:
    """The embedding cache's note on the radix cache in front (None: not replayed, the traffic has no prompts)."""
    if served is None:
        return (
            "the radix cache is not replayed (the traffic carries no prompts): every item is looked up, as under "
            "--disable-radix-cache"
        )
    return f"{served:,} item(s) the radix cache served (inside each request's cached prefix): never looked up"


def below_target(c: CacheResult, disabled: bool) -> str:
    """The ``cache-below-target`` message of the radix cache: prompt tokens served, against KV tokens."""
    to = f"; {c.recommendation.setting} would" if c.recommendation is not None else ""
    return (
        f"the {c.title} serves {c.hits:,} prompt tokens at {c.size_bytes:,} tokens, short of {c.target}% of the "
        f"{c.curve.unbounded[0]:,} an unbounded one serves{'; drop --disable-radix-cache' if disabled else to}"
    )


def _assumed(built: Built, page: int) -> str:
    life = (
        "request lifetimes from the log's receipts and Finish lines"
        if built.timed
        else "requests one at a time, in the log's order, each released before the next is admitted"
    )
    out = (
        f"output tokens: the log's completion_tokens for {built.outputs:,} requests"
        if built.outputs
        else "output tokens unknown: only prompts are inserted"
    )
    return (
        f"assumed: {life}; {out}; page size {page}; each prompt prefilled in one chunk; the tokenizer: "
        f"{built.tokenizer}"
    )


def _check(built: Built, served: Sequence[int]) -> list[CacheNote]:
    """The replay against the server's ``cached_tokens``, request by request, where the traffic has them."""
    told = [(name, s, c) for name, s, c in zip(built.names, served, built.cached, strict=True) if c is not None]
    if not told or built.estimated:
        return []
    for name, s, c in told:
        if s != c:
            return [
                CacheNote(
                    "prefix-replay-differs",
                    "warning",
                    f"request {name}: the server served {c:,} cached tokens, the replay {s:,} (first of "
                    f"{sum(1 for _, s2, c2 in told if s2 != c2):,} differing, of {len(told):,} with cached_tokens)",
                )
            ]
    return [
        CacheNote(
            "prefix-replay-matches",
            "info",
            f"the replay serves each of the {len(told):,} requests with cached_tokens exactly the server's",
        )
    ]
