"""Time ``mmpool tune`` on N requests of multi-turn chat traffic, whole processes.

Writes an OpenAI body log of chats (seeded: the same file on every run): each chat a system prompt,
then turns of a user message (an image and --words words) and an answer; each turn's request re-sends
the chat so far, earlier images included, as chat clients send it (the traffic of
``benchmarks/prefix_tokens.py``, as a file a user gives ``tune``). The images are small distinct PNGs
(--images of them, each chat drawing its own at random), so the embedding cache, the prefix cache in
front of it and the pool all have work. Requests arrive --rate a second, chats interleaved.

Then runs ``python -m mmpool_cli tune --model examples/qwen2.5-vl-7b --from LOG --max-total-tokens KV
--format json`` (the whole command: start-up, reading and sizing the log, every memory's replay, the
front and the report; today's launch a KV cache of --kv tokens, the pool and the embedding cache at
SGLang's defaults) --runs times, and prints each run's wall and CPU seconds (the process and the
workers it waited for), the load average before it, and the median.

    python benchmarks/tune.py [--requests 100000] [--runs 3] [--kv 500000] [--turns 5] [--images 2000]
    python benchmarks/tune.py --write LOG      # only write the log (to profile or rerun by hand)
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import random
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))

from make_vllm_cache_example import png  # noqa: E402  (the examples' one PNG writer)

SIZES = [(224, 224), (320, 240), (256, 192), (192, 256), (288, 288)]
WORDS = [
    "the", "parcel", "invoice", "truck", "route", "delivery", "weekly", "depot",
    "pallet", "crate", ",", ".", "12", "34", "north", "south",
]  # fmt: skip
START = 1_780_100_000  # epoch seconds of the first request
MODEL = "Qwen/Qwen2.5-VL-7B-Instruct"
SEED = 20261207


def write_log(path: Path, requests: int, turns: int = 5, images: int = 2000, words: int = 8, rate: int = 20) -> int:
    """Write ``requests`` chat requests to ``path`` (seeded); returns the number of image items in it."""
    rng = random.Random(SEED)
    urls = [
        "data:image/png;base64," + base64.b64encode(png(*SIZES[n % len(SIZES)], 7919 * (n + 1))).decode()
        for n in range(images)
    ]

    def say() -> str:
        return " ".join(rng.choice(WORDS) for _ in range(words))

    live: list[list[dict[str, object]]] = []  # chats under way, each its messages so far
    left: list[int] = []  # turns each has still to send
    written = items = 0
    with path.open("w") as out:
        while written < requests:
            if len(live) < 8 or rng.random() < 0.05:  # a few chats at once, interleaved
                live.append([{"role": "system", "content": "You answer questions about shipping documents."}])
                left.append(turns)
            c = rng.randrange(len(live))
            chat = live[c]
            image = {"type": "image_url", "image_url": {"url": urls[rng.randrange(images)]}}
            chat.append({"role": "user", "content": [image, {"type": "text", "text": say()}]})
            items += sum(1 for m in chat if m["role"] == "user")
            t = START + written / rate
            body = {"model": MODEL, "messages": chat}
            out.write(json.dumps({"timestamp": round(t, 3), "body": body}, separators=(",", ":")) + "\n")
            written += 1
            chat.append({"role": "assistant", "content": say()})
            left[c] -= 1
            if not left[c]:
                del live[c], left[c]
    return items


def _process(argv: list[str]) -> tuple[float, float, dict]:
    """``python -m mmpool_cli ARGV`` in this checkout: wall and CPU seconds (with the children it waited for)
    and its JSON."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-m", "mmpool_cli", *argv], cwd=ROOT, env=env, capture_output=True, text=True
    )
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode not in (0, 1):
        raise SystemExit(f"mmpool {' '.join(argv)}: exit {done.returncode}\n{done.stderr}")
    cpu = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
    return wall, cpu, json.loads(done.stdout)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--requests", type=int, default=100_000)
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--turns", type=int, default=5)
    p.add_argument("--images", type=int, default=2000)
    p.add_argument("--words", type=int, default=8)
    p.add_argument("--rate", type=int, default=20, help="requests a second")
    p.add_argument("--kv", type=int, default=500_000, help="today's --max-total-tokens")
    p.add_argument("--write", metavar="LOG", help="only write the log to LOG")
    p.add_argument("--extra", nargs=argparse.REMAINDER, default=[], help="more flags for tune, last")
    a = p.parse_args()
    if a.write:
        n = write_log(Path(a.write), a.requests, a.turns, a.images, a.words, a.rate)
        print(f"wrote {a.write}: {a.requests:,} requests, {n:,} image items, {Path(a.write).stat().st_size:,} B")
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        log = Path(tmp) / "chats.jsonl"
        n = write_log(log, a.requests, a.turns, a.images, a.words, a.rate)
        argv = ["tune", "--model", "examples/qwen2.5-vl-7b", "--from", str(log), "--max-total-tokens", str(a.kv)]
        argv += ["--format", "json", *a.extra]
        git = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
        print(
            f"{a.requests:,} requests, {n:,} image items, {log.stat().st_size:,} B; {git.stdout.strip()}; "
            f"{os.cpu_count()} cores; mmpool {' '.join(argv)}"
        )
        walls = []
        for _ in range(a.runs):
            load = os.getloadavg()[0]
            wall, cpu, data = _process(argv)
            rows = data.get("rows", [])
            print(f"  {wall:.2f} s wall, {cpu:.2f} s CPU; {len(rows)} rows; load before {load:.2f}")
            walls.append(wall)
    print(f"median of {a.runs}: {statistics.median(walls):.2f} s wall")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
