"""Time ``mmpool cache``'s radix replay from the traffic to the served tokens, for N requests of
multi-turn chats: each request's body read (``json.loads`` of its line and ``messages_of``), the chats
rendered, tokenized (the estimate) and padded as SGLang pads them (``engines/sglang/prefix.build``),
and the prompts replayed through SGLang's radix rule (``caches.prefix``) at half the capacity the
traffic ever holds (so it evicts; that capacity is found before the clock starts).

    python benchmarks/prefix_tokens.py [--requests 100000] [--turns 5] [--image-tokens 16] [--words 8]

Each chat: a system prompt, then turns of a user message (an image of --image-tokens and --words words)
and an answer (--words words); each turn's request re-sends the chat so far (the defaults: about 10^7
prompt tokens for 10^5 requests). Prints the requests, prompt tokens, the tokens served, and the
seconds of CPU and wall of each step and of the whole (the replay alone, on other traffic:
benchmarks/prefix_replay.py).
"""

from __future__ import annotations

import argparse
import json
import random
import time

from mmpool_cli.caches import prefix as replay
from mmpool_cli.caches.report import CacheItem
from mmpool_cli.core.collector import paused
from mmpool_cli.engines.sglang import prefix
from mmpool_cli.inputs.traffic.cache_request import CacheRequest, ModelShape
from mmpool_cli.inputs.traffic.prompts import Prompt, Timed, messages_of
from mmpool_cli.workload.families import family

WORDS = [
    "the", "parcel", "invoice", "truck", "route", "delivery", "weekly", "depot",
    "pallet", "crate", ",", ".", "12", "34", "north", "south",
]  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--requests", type=int, default=100_000)
    parser.add_argument("--turns", type=int, default=5)
    parser.add_argument("--image-tokens", type=int, default=16)
    parser.add_argument("--words", type=int, default=8)
    args = parser.parse_args()
    rng = random.Random(20261207)

    def say(n: int) -> str:
        return " ".join(rng.choice(WORDS) for _ in range(n))

    items: list[CacheItem] = []
    lines: list[tuple[str, str]] = []  # (request, its body as the log's line)
    chats = args.requests // args.turns
    for c in range(chats):
        messages: list[dict] = [{"role": "system", "content": "You answer questions about shipping documents."}]
        for t in range(args.turns):
            image = {"type": "image_url", "image_url": {"url": "-"}}
            messages.append({"role": "user", "content": [image, {"type": "text", "text": say(args.words)}]})
            name = f"c{c}t{t}"
            for k in range(t + 1):  # every earlier image again
                items.append(CacheItem(name, "image", f"img-{c}-{k}", args.image_tokens * 4 * 1176 * 4, "image"))
            lines.append((name, json.dumps({"model": "m", "messages": messages})))
            messages.append({"role": "assistant", "content": say(args.words)})
    fam = family("qwen2.5-vl")
    groups = list(prefix.requests_of(items))
    tokens = [args.image_tokens] * len(items)

    clock = [(time.process_time(), time.perf_counter())]
    prompts: dict[str, Timed] = {}
    with paused(keep=True):  # as `mmpool cache` runs: the collector paused, what it made frozen at the end
        for name, line in lines:
            prompts[name] = Timed(Prompt(messages_of(json.loads(line)["messages"])), 2 * len(prompts), None)
        clock.append((time.process_time(), time.perf_counter()))
        req = CacheRequest(fam, dict(fam.settings), items, "bench", ModelShape(3584), prompts=prompts)
        built = prefix.build(req, tokens, groups)
        clock.append((time.process_time(), time.perf_counter()))
        top = replay.never_evicts(built.requests, replay.Radix)  # the capacity, off the clock
        clock.append((time.process_time(), time.perf_counter()))
        served = replay.replay(built.requests, replay.Radix(top // 2))
    clock.append((time.process_time(), time.perf_counter()))
    steps = [(b[0] - a[0], b[1] - a[1]) for a, b in zip(clock, clock[1:], strict=False)]
    read, build, _, run = steps
    cpu, wall = read[0] + build[0] + run[0], read[1] + build[1] + run[1]
    print(
        f"{len(built.requests):,} requests, {built.prompt_tokens:,} prompt tokens, {sum(served):,} served "
        f"at {top // 2:,} tokens (never evicts from {top:,})"
    )
    for what, (c, w) in (("read", read), ("build", build), ("replay", run)):
        print(f"  {what}: {c:.2f} s of CPU, {w:.2f} s wall")
    print(f"whole (read + build + replay): {cpu:.2f} s of CPU, {wall:.2f} s wall")


if __name__ == "__main__":
    main()
