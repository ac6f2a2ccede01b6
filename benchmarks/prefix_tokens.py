"""Time the prompts' side of ``mmpool cache``'s radix replay: chats rendered, tokenized (the estimate)
and padded as SGLang pads them (``engines/sglang/prefix.build``), for N requests of multi-turn chats.

    python benchmarks/prefix_tokens.py [--requests 100000] [--turns 5] [--image-tokens 16] [--words 8]

Each chat: a system prompt, then turns of a user message (an image of --image-tokens and --words words)
and an answer (--words words); each turn's request re-sends the chat so far (the defaults: about 10^7
prompt tokens for 10^5 requests). Prints the requests, prompt
tokens and the seconds of CPU the build took (the replay itself: benchmarks/prefix_replay.py).
"""

from __future__ import annotations

import argparse
import random
import time

from mmpool_cli.caches.report import CacheItem
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
    prompts: dict[str, Timed] = {}
    chats = args.requests // args.turns
    for c in range(chats):
        messages: list[dict] = [{"role": "system", "content": "You answer questions about shipping documents."}]
        for t in range(args.turns):
            image = {"type": "image_url", "image_url": {"url": "-"}}
            messages.append({"role": "user", "content": [image, {"type": "text", "text": say(args.words)}]})
            name = f"c{c}t{t}"
            for k in range(t + 1):  # every earlier image again
                items.append(CacheItem(name, "image", f"img-{c}-{k}", args.image_tokens * 4 * 1176 * 4, "image"))
            prompts[name] = Timed(Prompt(messages_of(list(messages))), 2 * len(prompts), None)
            messages.append({"role": "assistant", "content": say(args.words)})
    fam = family("qwen2.5-vl")
    req = CacheRequest(fam, dict(fam.settings), items, "bench", ModelShape(3584), prompts=prompts)
    groups = list(prefix.requests_of(items))
    tokens = [args.image_tokens] * len(items)
    start = time.process_time()
    built = prefix.build(req, tokens, groups)
    spent = time.process_time() - start
    print(f"{len(built.requests):,} requests, {built.prompt_tokens:,} prompt tokens: {spent:.2f} s of CPU (build)")


if __name__ == "__main__":
    main()
