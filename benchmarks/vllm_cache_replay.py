"""How long ``mmpool cache --engine vllm`` takes to replay vLLM's caches over a large traffic.

Builds a synthetic chat traffic in memory (no file, no image decoding: the traffic reader's cost is
``benchmarks/traffic_log.py``'s), then times the caches list (both curves, the recommendations, the
replays at the deployment's sizes) for Qwen2.5-VL at vLLM's defaults: wall time, and the process's
CPU time (the wall time of a quiet machine, on a shared one). One stack-distance pass per cache
gives most sizes; the rest are replays (compiled where built), each linear in the images:
"replays" counts them.

Usage::

    python benchmarks/vllm_cache_replay.py --requests 100000 [--layout lru|shm] [--window 4]
"""

from __future__ import annotations

import argparse
import random
import time

from mmpool_cli.engines.vllm import caches, versions
from mmpool_cli.engines.vllm.cache_traffic import ImageTraffic
from mmpool_cli.engines.vllm.request import VllmRequest
from mmpool_cli.workload import hf

SIZES = [(1280, 720), (1920, 1080), (1024, 768), (800, 600), (640, 480), (1080, 1920), (512, 512)]


def traffic(requests: int, seed: int = 34) -> ImageTraffic:
    """Chats of a few turns, each turn resending the chat's images, over a pool of distinct images."""
    rng = random.Random(seed)
    out = ImageTraffic(["synthetic"])
    chats: list[list[str]] = []
    for n in range(requests):
        if not chats or rng.random() < 0.3:
            chats.append([])
        chat = chats[rng.randrange(max(1, len(chats) - 50), len(chats))] if len(chats) > 1 else chats[0]
        key = f"img{n}"
        out.dims[key] = SIZES[n % len(SIZES)]
        chat.append(key)
        out.requests.append(list(chat[-6:]))
    out.bodies = requests
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=100_000)
    parser.add_argument("--layout", choices=("lru", "shm"), default="lru")
    parser.add_argument("--window", type=int, default=4)
    args = parser.parse_args()
    t = traffic(args.requests)
    req = VllmRequest(release=versions.release("0.34.0"), model=hf.resolve("qwen2.5-vl"), cache_type=args.layout)
    replays = [0]
    start, cpu = time.perf_counter(), time.process_time()
    entries = caches.caches(req, t, args.window, progress=lambda: replays.__setitem__(0, replays[0] + 1))
    took, cpu = time.perf_counter() - start, time.process_time() - cpu
    images = t.images
    print(
        f"{args.requests:,} requests, {images:,} images, {args.layout}, window {args.window}: "
        f"{replays[0]} replays in {took:.2f} s ({cpu:.2f} s of CPU); "
        f"processor hits {entries[0]['hits']:,}, encoder no-wait budget {entries[1]['recommended_tokens']:,} tokens"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
