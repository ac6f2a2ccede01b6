"""vLLM 0.34.0's prefix caching over the traffic's prompts, and what it leaves the encoder cache.

* **The prompts**: the chat rendered by the model's template and tokenized by its tokenizer
  (``--tokenizer``, else a ``--model`` folder's; estimated where none loads, and said so), each
  image's placeholder expanded to its tokens. vLLM keeps the placeholder ids and carries the
  item's hash in the keys of the blocks it overlaps (``kv_cache_utils.py`` ``_gen_mm_extra_hash_keys``).
* **The replay**: the neutral ``caches.prefix`` block replay (full blocks of ``--block-size``,
  default 16; ``--num-gpu-blocks-override`` blocks), off under ``--no-enable-prefix-caching``
  (prefix caching is on by default in v1: ``config/cache.py``). A request's served tokens are its
  ``num_computed_tokens`` at admission.
* **What the encoder cache sees**: the scheduler schedules an item's encoder input only where it
  lies past ``num_computed_tokens`` (``v1/core/sched/scheduler.py`` ``_try_schedule_encoder_inputs``:
  ``start_pos + num_encoder_tokens <= num_computed_tokens`` skips it), so an item inside the cached
  prefix never reaches the encoder cache; the processor cache, in the API process, sees every item.

Pure core: standard library only.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

from mmpool_cli.caches import prefix
from mmpool_cli.caches.replay import REPLAYED
from mmpool_cli.inputs.traffic.prompts import Prompt
from mmpool_cli.inputs.traffic.tokens import Chat, Estimated, Memo, Tokenizer, load, tokens_of, try_load

CURVE_POINTS = 24
_ITEM_TEXT = {"image": "<|vision_start|><|image_pad|><|vision_end|>"}
WRAP = ("<|vision_start|>", "<|vision_end|>")
PAD = "<|image_pad|>"
CHATS = {
    "qwen2-vl": Chat("You are a helpful assistant.", _ITEM_TEXT),
    "qwen2.5-vl": Chat("You are a helpful assistant.", _ITEM_TEXT),
    "qwen3-vl": Chat(None, _ITEM_TEXT),
}


@dataclass(frozen=True)
class PrefixFlags:
    """vLLM's prefix-caching flags of the launch, and where the model's tokenizer is."""

    enabled: bool = True  # --no-enable-prefix-caching turns it off
    num_blocks: int | None = None  # --num-gpu-blocks-override; None: not given
    block_size: int = 16
    tokenizer: str | None = None  # --tokenizer
    model_dir: str | None = None


def flags_of_launch(reading: Any, model_dir: str | None = None) -> PrefixFlags:
    """The prefix-caching flags of a ``vllm serve`` launch as ``args.read`` parsed it (``reading.get``), for a
    command that replays its traffic (``check --from``); ``model_dir``: the model's folder, for its tokenizer."""
    return PrefixFlags(
        enabled=reading.get("enable_prefix_caching") is not False,
        num_blocks=reading.get("num_gpu_blocks_override"),
        block_size=reading.get("block_size") or 16,
        tokenizer=reading.get("tokenizer"),
        model_dir=model_dir,
    )


@dataclass
class PrefixReplay:
    """The items the prefix cache covered (per request, their positions), its entry and its notes."""

    covered: list[set[int]]
    entry: dict[str, Any]
    notes: list[str] = field(default_factory=list)
    items_served: int = 0
    behind: list[list[str]] = field(default_factory=list)  # each request's items outside its cached prefix

    @property
    def note(self) -> str:
        """The encoder cache's note on the prefix cache in front."""
        return f"{self.items_served:,} item(s) prefix caching served (in a cached prefix): never encoded"


@dataclass
class Built:
    """The traffic's prompts as the block cache sees them, made once for every capacity replayed."""

    requests: list[prefix.PrefixRequest]  # the requests whose items were placed in their prompt
    spans: list[list[tuple[int, int, int]]]  # per built request: (item position, start, length)
    placed: list[int]  # per built request: its index in the traffic
    tokenizer: Tokenizer

    def served(self, flags: PrefixFlags, blocks: int) -> list[int]:
        """Per built request, the prompt tokens vLLM's prefix caching serves at ``blocks`` KV blocks."""
        if not self.requests or not flags.enabled:
            return [0] * len(self.requests)
        return prefix.replay(self.requests, prefix.Blocks(blocks, flags.block_size))

    def behind(
        self, requests: Sequence[Sequence[str]], served: Sequence[int]
    ) -> tuple[list[set[int]], int, list[list[str]]]:
        """What ``served`` leaves the encoder cache: per request the item positions inside its cached prefix,
        the distinct items so served (never encoded), and each request's items outside it."""
        covered: list[set[int]] = [set() for _ in requests]
        for n, got_served, mine in zip(self.placed, served, self.spans, strict=True):
            covered[n] = {k for k, start, length in mine if start + length <= got_served}
        spared = sum(len({requests[n][k] for k in c}) for n, c in enumerate(covered))
        behind = [
            [k for i, k in enumerate(r) if i not in c] if c else list(r) for r, c in zip(requests, covered, strict=True)
        ]
        return covered, spared, behind


def build(
    requests: Sequence[Sequence[str]],
    prompts: Sequence[Prompt | None],
    tokens: Mapping[str, int],
    family: str,
    flags: PrefixFlags,
) -> Built:
    """Each request's prompt as vLLM keys its blocks: rendered, tokenized, each image's placeholders expanded
    (a request whose items its prompt does not place is left out: the prefix cache serves it nothing)."""
    tok: Tokenizer | None = load(flags.tokenizer) if flags.tokenizer is not None else None
    if tok is None and flags.model_dir is not None:
        tok = try_load(flags.model_dir)
    tok = tok if tok is not None else Estimated()
    chat = CHATS.get(family, CHATS["qwen3-vl"])
    memo = Memo(tok)
    wrap, pad = (tok.encode(WRAP[0]), tok.encode(WRAP[1])), (tok.encode(PAD) or [0])[0]
    built: list[prefix.PrefixRequest] = []
    spans: list[list[tuple[int, int, int]]] = []  # per request: (position, start, length) of each item
    placed: list[int] = []
    with prefix.no_collection():  # the prompts' token lists: millions of objects, no cycle
        for n, (keys, prompt) in enumerate(zip(requests, prompts, strict=True)):
            got = None if prompt is None else tokens_of(prompt, tok, chat, memo)
            slots = [] if got is None else [r for r in got.runs if r and isinstance(r[0], str)]
            if got is None or len(slots) != len(keys) or any(s[0] != "image" for s in slots):
                continue
            ids: list[int] = []
            extra: list[tuple[int, int, str]] = []
            mine: list[tuple[int, int, int]] = []
            for run in got.runs:
                if run and isinstance(run[0], str):
                    k = int(run[1])
                    ids.extend(wrap[0])
                    start, length = len(ids), tokens[keys[k]]
                    ids.extend([pad] * length)  # the placeholder ids: the item's hash rides in the block keys
                    extra.append((start, length, keys[k]))
                    mine.append((k, start, length))
                    ids.extend(wrap[1])
                else:
                    ids.extend(run)  # a text run: ints, as the tokenizers give them
            built.append(prefix.PrefixRequest(ids, (), extra, 2 * n, 2 * n + 1))
            spans.append(mine)
            placed.append(n)
    return Built(built, spans, placed, tok)


def assumed(made: Built, flags: PrefixFlags) -> str:
    """What the block cache's replay assumes of the traffic, said once."""
    return (
        "requests one at a time, in the log's order, each released before the next is admitted; output tokens "
        f"unknown: only prompts are cached; block size {flags.block_size}; each prompt prefilled in one chunk; the "
        f"tokenizer: {made.tokenizer.name}"
    )


def traffic_findings(made: Built, flags: PrefixFlags, requests: int) -> list[tuple[str, str, str]]:
    """``(code, severity, message)`` of what the traffic and flags leave the prefix cache: off, its tokens
    estimated, requests whose prompts cannot place their items."""
    out: list[tuple[str, str, str]] = []
    if not flags.enabled:
        out.append(("prefix-cache-off", "info", "--no-enable-prefix-caching: nothing is served, every item is encoded"))
    if made.tokenizer.estimated and flags.enabled:
        out.append(
            (
                "prefix-tokens-estimated",
                "warning",
                "no tokenizer loaded (give --tokenizer DIR, or a --model folder with one): the prompts' text tokens "
                "are estimated, so the prefix cache's tokens are estimates; which items it serves is not",
            )
        )
    if len(made.requests) < requests:
        out.append(
            (
                "prefix-not-replayed",
                "warning",
                f"{requests - len(made.requests):,} of {requests:,} requests carry no prompt mmpool can place their "
                "items in: the prefix cache serves them nothing",
            )
        )
    return out


def server_findings(
    made: Built, prompts: Sequence[Prompt | None], flags: PrefixFlags, served: Sequence[int]
) -> list[tuple[str, str, str]]:
    """``(code, severity, message)``: the replay's ``served`` held to the ``cached_tokens`` the server logged,
    where the bodies carry them and the tokens are the tokenizer's (an estimate proves nothing)."""
    told = [(n, s, p.cached_tokens) for n, s in zip(made.placed, served, strict=True) if (p := prompts[n]) is not None]
    told = [(n, s, c) for n, s, c in told if c is not None]
    if not told or made.tokenizer.estimated or not flags.enabled:
        return []
    wrong = [(n, s, c) for n, s, c in told if s != c]
    if not wrong:
        return [
            (
                "prefix-replay-matches",
                "info",
                f"the replay serves each of the {len(told):,} requests with cached_tokens exactly the server's",
            )
        ]
    n, s, c = wrong[0]
    return [
        (
            "prefix-replay-differs",
            "warning",
            f"request {n + 1} of the log: the server served {c:,} cached tokens, the replay {s:,} (first of "
            f"{len(wrong):,} differing, of {len(told):,} with cached_tokens)",
        )
    ]


def replay(
    requests: Sequence[Sequence[str]],
    prompts: Sequence[Prompt | None],
    tokens: Mapping[str, int],
    family: str,
    flags: PrefixFlags,
    target: Fraction,
    *,
    known: Built | None = None,
) -> PrefixReplay:
    """The block cache over the requests' prompts at the launch's blocks, and the curve of its served tokens
    (``known``: the prompts ``build`` made, where made)."""
    made = build(requests, prompts, tokens, family, flags) if known is None else known
    built, tok = made.requests, made.tokenizer
    size = flags.block_size
    total = sum(len(r.tokens) for r in built)
    unbounded = -(-max(total, 1) // size) + 1  # one block is the null block, never lent
    least = -(-max((len(r.tokens) for r in built), default=1) // size) + 1
    blocks = flags.num_blocks if flags.num_blocks is not None else unbounded
    findings: list[dict[str, str]] = []
    notes = [f"assumed: {assumed(made, flags)}"]

    def finding(code: str, severity: str, message: str) -> None:
        from mmpool_cli.core.codes import Severity, check

        check(code, Severity(severity))  # an unregistered code is a bug in mmpool
        findings.append({"code": code, "severity": severity, "message": message})

    if flags.num_blocks is None and flags.enabled:
        finding(
            "prefix-capacity-assumed",
            "warning",
            f"the KV capacity is not given: vLLM's prefix caching replayed with room for all {total:,} tokens "
            f"({unbounded:,} blocks), nothing evicted (the most it can serve); give --num-gpu-blocks-override N",
        )
    for code, severity, message in traffic_findings(made, flags, len(requests)):
        finding(code, severity, message)
    served = made.served(flags, blocks)
    for code, severity, message in server_findings(made, prompts, flags, served):
        finding(code, severity, message)
    covered, spared, behind = made.behind(requests, served)
    span = max(unbounded - least, 0)
    points = sorted({least + span * k // CURVE_POINTS for k in range(CURVE_POINTS + 1)} | {blocks})
    sums = prefix.curve(built, prefix.Blocks, points, block_size=size) if built else [0] * len(points)
    at = sum(served)
    top = sums[-1]
    need_frac = Fraction(top) * target / 100
    need = -(-need_frac.numerator // need_frac.denominator)
    smallest = next((p for p, s in zip(points, sums, strict=True) if s >= need), None) if top else None
    entry: dict[str, Any] = {
        "name": "prefix",
        "engine": "vllm",
        "size_bytes": None,
        "size_origin": (
            "--no-enable-prefix-caching: off"
            if not flags.enabled
            else f"--num-gpu-blocks-override {blocks}"
            if flags.num_blocks is not None
            else "not given: room for every token (nothing evicted)"
        ),
        "lookups": total,
        "hits": at,
        "work_saved": at,
        "work_unit": "prompt tokens",
        "unbounded_hits": top,
        "unbounded_work_saved": top,
        "unbounded_bytes": None,
        "curve": [
            {"size_bytes": None, "hits": s, "work_saved": s, "size_tokens": p * size, "size_blocks": p}
            for p, s in zip(points, sums, strict=True)
        ],
        "curve_method": REPLAYED,
        "target_hits_percent": str(target),
        "meets_target": at >= need,
        "recommended_bytes": None,
        "recommended_setting": None if smallest is None else f"--num-gpu-blocks-override {smallest}",
        "recommended_cost": None if smallest is None else {"kv_tokens": smallest * size},
        "notes": notes,
        "unit": "tokens",
        "size_tokens": (blocks * size) if flags.enabled else 0,
        "size_blocks": blocks if flags.enabled else 0,
        "tokens_estimated": tok.estimated,
        "requests_replayed": len(built),
        "requests_not_replayed": len(requests) - len(built),
        "findings": findings,
    }
    return PrefixReplay(covered, entry, [], spared, behind)
