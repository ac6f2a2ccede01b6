"""Time the exact cache curve (one pass, compiled) over N lookups: python benchmarks/cache_curve.py [N] [DISTINCT].

The lookups are seeded: keys drawn so that about half repeat soon (multi-turn chats re-sending their
images) and the rest spread over DISTINCT items, sizes those of Qwen2.5-VL-7B image embeddings
(256 to 16,384 tokens x 3584 x 2 bytes). Prints the time of the pass alone (its input already in
arrays) and the curve's number of steps.
"""

from __future__ import annotations

import random
import resource
import sys
import time
from array import array

from mmpool_cli.caches import curve as cache_curve


def lookups(n: int, distinct: int, seed: int = 0) -> tuple[array[int], array[int]]:
    rng = random.Random(seed)
    sizes_of = array("q", (rng.randint(256, 16384) * 3584 * 2 for _ in range(distinct)))
    keys = array("q", bytes(8 * n))
    sizes = array("q", bytes(8 * n))
    recent = 0
    for i in range(n):
        if rng.random() < 0.5 and i:
            key = keys[max(0, i - 1 - int(rng.expovariate(0.1)))]
        else:
            key = rng.randrange(distinct)
        keys[i] = key
        sizes[i] = sizes_of[key]
        recent = key
    del recent
    return keys, sizes


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 10_000_000
    distinct = int(sys.argv[2]) if len(sys.argv) > 2 else 1_000_000
    if cache_curve.FAST is None:
        sys.exit("the compiled kernel (_stackdist) is not built: python setup.py build_ext --inplace")
    keys, sizes = lookups(n, distinct)
    ones = array("q", [1]) * n
    before = resource.getrusage(resource.RUSAGE_SELF)
    start = time.perf_counter()
    curve = cache_curve.lru_curve(keys, sizes, ones, ones, native=True)
    took = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_SELF)
    cpu = after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime
    print(
        f"{n:,} lookups over {distinct:,} items: {took:.2f} s ({cpu:.2f} s of CPU), {len(curve.steps):,} steps, "
        f"unbounded hits {curve.unbounded[0]:,}"
    )


if __name__ == "__main__":
    main()
