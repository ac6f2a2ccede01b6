"""Time one exact replay of a cache at one size (what each point of a replayed curve costs):
python benchmarks/cache_replay.py [N] [DISTINCT].

The lookups are seeded multi-turn chats: each request re-sends its chat's earlier images and adds
one (up to 8 a chat), chats interleaved, images of Qwen2.5-VL-7B embeddings (256 to 16,384 tokens x
3584 x 2 bytes) drawn from DISTINCT. Prints the time of one replay at half the size that never
evicts, of the curve's points (``replay_many``: spread over the cores), and of the whole SGLang
embedding curve as ``mmpool cache`` makes it (with the bisection of the recommendation).
"""

from __future__ import annotations

import random
import sys
import time

from mmpool_cli.caches.replay import Lookups, never_evicts, one_pass_sizes, replay, replay_many
from mmpool_cli.core.workers import default_jobs
from mmpool_cli.engines.sglang.caches import REPLAY_POINTS


def lookups(n: int, distinct: int, seed: int = 0) -> Lookups:
    rng = random.Random(seed)
    sizes_of = [rng.randint(256, 16384) * 3584 * 2 for _ in range(distinct)]
    keys: list[int] = []
    groups: list[int] = []
    chats: list[list[int]] = [[] for _ in range(64)]
    g = 0
    while len(keys) < n:
        c = rng.randrange(len(chats))
        if len(chats[c]) >= 8:
            chats[c] = []
        chats[c].append(rng.randrange(distinct))
        batch = list(dict.fromkeys(chats[c]))[: n - len(keys)]
        keys.extend(batch)
        groups.extend([g] * len(batch))
        g += 1
    ones = [1] * len(keys)
    return Lookups(keys, [sizes_of[k] for k in keys], ones, ones, groups)


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 1_000_000
    distinct = int(sys.argv[2]) if len(sys.argv) > 2 else 100_000
    lk = lookups(n, distinct)
    assert one_pass_sizes(lk) is None  # multi-turn chats: replayed at each point
    top = never_evicts(lk)
    start = time.perf_counter()
    hits, _ = replay(lk, top // 2)
    took = time.perf_counter() - start
    points = [top * k // REPLAY_POINTS for k in range(REPLAY_POINTS + 1)]
    start = time.perf_counter()
    replay_many(lk, points)
    spread = time.perf_counter() - start
    probes = max(1, (top >> 20).bit_length())  # the recommendation's bisection, one replay a probe
    print(
        f"{n:,} lookups over {distinct:,} items: one replay {took:.2f} s ({hits:,} hits at {top // 2:,} B); "
        f"the curve's {len(points)} points {spread:.1f} s over {default_jobs()} cores; "
        f"with the bisection's {probes} replays about {spread + took * probes:.0f} s"
    )


if __name__ == "__main__":
    main()
