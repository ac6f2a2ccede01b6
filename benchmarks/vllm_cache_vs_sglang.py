"""``mmpool cache --engine vllm`` against ``mmpool cache`` (SGLang) on one OpenAI body log, whole processes.

Writes a log of multi-turn chats (each turn resends up to 3 of the chat's images, over a pool of
small distinct PNGs) and times both commands on it as a user runs them (start-up, reading and
decoding the log's image headers, both engines' caches, the JSON report), alternating the two
(ABAB) and printing each run and the medians' ratio.

Usage::

    python benchmarks/vllm_cache_vs_sglang.py --requests 6000 --images 300 [--runs 5]
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))

from make_vllm_cache_example import png  # noqa: E402  (the example's PNG writer)

SIZES = [(224, 224), (320, 240), (256, 192), (192, 256), (288, 288)]
MMPOOL = [sys.executable, "-c", "from mmpool_cli.entry import run; run()", "cache"]


def write_log(path: Path, requests: int, images: int, seed: int = 41) -> None:
    rng = random.Random(seed)
    urls = [
        "data:image/png;base64," + base64.b64encode(png(*SIZES[n % len(SIZES)], 7919 * (n + 1))).decode()
        for n in range(images)
    ]
    chats: list[list[str]] = []
    with path.open("w") as out:
        for _ in range(requests):
            if not chats or rng.random() < 0.2:
                chats.append([])
            chat = chats[rng.randrange(max(0, len(chats) - 20), len(chats))]
            chat.append(urls[rng.randrange(images)])
            parts = [{"type": "image_url", "image_url": {"url": u}} for u in chat[-3:]]
            body = {"model": "m", "messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}, *parts]}]}
            out.write(json.dumps(body) + "\n")


def run(args: list[str]) -> float:
    start = time.perf_counter()
    done = subprocess.run(MMPOOL + args, capture_output=True, text=True, env=os.environ | {"PYTHONPATH": str(ROOT)})
    took = time.perf_counter() - start
    if done.returncode not in (0, 1):
        sys.exit(f"mmpool cache {' '.join(args)}: exit {done.returncode}\n{done.stderr}")
    return took


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--requests", type=int, default=6000)
    p.add_argument("--images", type=int, default=300)
    p.add_argument("--runs", type=int, default=5)
    a = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        log = Path(tmp) / "bodies.jsonl"
        write_log(log, a.requests, a.images)
        common = ["--model", "qwen2.5-vl", "--from", str(log), "--format", "json"]
        sglang = [*common, "--hidden-size", "3584"]
        vllm = [*common, "--engine", "vllm"]
        run(vllm)  # warm the file cache and the bytecode
        times: dict[str, list[float]] = {"sglang": [], "vllm": []}
        for _ in range(a.runs):
            times["sglang"].append(run(sglang))
            times["vllm"].append(run(vllm))
    s, v = statistics.median(times["sglang"]), statistics.median(times["vllm"])
    print(f"{a.requests:,} requests, {a.images} images; runs (s): " + json.dumps(times))
    print(f"median: cache (SGLang) {s:.2f} s, cache --engine vllm {v:.2f} s: {v / s:.2f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
