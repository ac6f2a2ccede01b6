"""Time the exact cache curve over N lookups: python benchmarks/cache_curve.py [--chat] [N] [DISTINCT].

Without ``--chat``: one pass (compiled) over seeded lookups, keys drawn so that about half repeat
soon and the rest spread over DISTINCT items, sizes those of Qwen2.5-VL-7B image embeddings (256 to
16,384 tokens x 3584 x 2 bytes). Prints the time of the pass alone (its input already in arrays) and
the curve's number of steps.

``--chat``: SGLang's embedding cache on seeded multi-turn chats (64 chats interleaved, each request
re-sends its chat's earlier images and adds one, up to 8 a chat; images drawn from DISTINCT, sizes
as above), N lookups in all: traffic where one stack does not hold SGLang's order, so that
``mmpool cache`` makes the curve its other way (``curve_method``). Times the embedding cache's curve
with its recommendation as ``mmpool cache`` makes it (``engines/sglang/caches.py``, the lookups
already built), and prints how it was made.
"""

from __future__ import annotations

import random
import resource
import sys
import time
from array import array
from fractions import Fraction

from mmpool_cli.caches import curve as cache_curve

TOKENS = (256, 16384)  # an image's embedding tokens, drawn evenly
HIDDEN = 3584  # Qwen2.5-VL-7B


def lookups(n: int, distinct: int, seed: int = 0) -> tuple[array[int], array[int]]:
    rng = random.Random(seed)
    sizes_of = array("q", (rng.randint(*TOKENS) * HIDDEN * 2 for _ in range(distinct)))
    keys = array("q", bytes(8 * n))
    sizes = array("q", bytes(8 * n))
    for i in range(n):
        if rng.random() < 0.5 and i:
            key = keys[max(0, i - 1 - int(rng.expovariate(0.1)))]
        else:
            key = rng.randrange(distinct)
        keys[i] = key
        sizes[i] = sizes_of[key]
    return keys, sizes


def cpu() -> float:
    """CPU seconds of this process and its children that ended (forked replay workers count too)."""
    r, c = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime + c.ru_utime + c.ru_stime


def one_pass(n: int, distinct: int) -> None:
    if cache_curve.FAST is None:
        sys.exit("the compiled kernel (_stackdist) is not built: python setup.py build_ext --inplace")
    keys, sizes = lookups(n, distinct)
    ones = array("q", [1]) * n
    before = cpu()
    start = time.perf_counter()
    curve = cache_curve.lru_curve(keys, sizes, ones, ones, native=True)
    took = time.perf_counter() - start
    print(
        f"{n:,} lookups over {distinct:,} items: {took:.2f} s ({cpu() - before:.2f} s of CPU), "
        f"{len(curve.steps):,} steps, unbounded hits {curve.unbounded[0]:,}"
    )


def chat(n: int, distinct: int, seed: int = 0) -> None:
    from mmpool_cli.caches.report import CacheItem
    from mmpool_cli.engines.sglang import caches as sglang
    from mmpool_cli.inputs.traffic.cache_request import CacheRequest, ModelShape
    from mmpool_cli.workload.families import family

    rng = random.Random(seed)
    fam = family("qwen2.5-vl")
    s = fam.settings
    row = 4 * 3 * int(s["temporal_patch_size"]) * int(s["patch_size"]) ** 2  # a float32 patch row
    merge = int(s["merge_size"]) ** 2
    tokens_of = [rng.randint(*TOKENS) for _ in range(distinct)]
    items: list[CacheItem] = []
    chats: list[list[int]] = [[] for _ in range(64)]
    r = 0
    while len(items) < n:
        c = rng.randrange(len(chats))
        if len(chats[c]) >= 8:
            chats[c] = []
        chats[c].append(rng.randrange(distinct))
        for k in list(dict.fromkeys(chats[c]))[: n - len(items)]:
            items.append(CacheItem(f"r{r}", "image", f"k{k}", tokens_of[k] * merge * row))
        r += 1
    req = CacheRequest(
        family=fam,
        settings=dict(s),
        items=items,
        source="chat",
        shape=ModelShape(HIDDEN),
        environ={"SGLANG_VLM_CACHE_SIZE_MB": "100"},
        target=Fraction(99),
    )
    width = sglang._width(req)
    looks = sglang._embedding_lookups(req, [sglang._tokens(req, it) for it in items], width)
    size, origin = sglang.embedding_size(req)
    before = cpu()
    start = time.perf_counter()
    got = sglang._result(req, "embedding", "embedding cache", looks, size, origin, "encoder tokens", 0)
    took = time.perf_counter() - start
    rec = got.recommendation
    print(
        f"chat traffic, {len(looks.keys):,} lookups over {distinct:,} items in {r:,} requests: the embedding "
        f"cache's curve {took:.2f} s ({cpu() - before:.2f} s of CPU), {got.method}, "
        f"{len(got.curve.steps):,} points, {got.hits:,} hits at {size:,} B, "
        f"recommended {rec.setting if rec else None}"
    )


def main() -> None:
    args = sys.argv[1:]
    is_chat = "--chat" in args
    args = [a for a in args if a != "--chat"]
    n = int(args[0]) if args else (1_000_000 if is_chat else 10_000_000)
    distinct = int(args[1]) if len(args) > 1 else (100_000 if is_chat else 1_000_000)
    (chat if is_chat else one_pass)(n, distinct)


if __name__ == "__main__":
    main()
