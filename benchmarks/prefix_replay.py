"""Time the prefix cache's replay of chat traffic: python benchmarks/prefix_replay.py [REQUESTS] [SEED].

The traffic is seeded multi-turn chats (REQUESTS, default 100,000, with about 100 prompt tokens
each on average: 10^7 prompt tokens): 16 system prompts shared by the chats, each turn's prompt its
chat's previous prompt, reply and new words, a fifth of the turns with one or two images (padded
with their own ids, 16 to 100 tokens, from 2,000 distinct ones); chats interleaved, each turn
running 1 to 20 s with about 64 running at once. A chat ends after a few turns (its prompt
capped), so the prompts stay near the mean. Prints, for SGLang's radix rule and vLLM's block rule,
the median of three replays at a capacity that evicts (half of what the traffic ever holds) and
the prompt tokens served; the requests are built before the clock starts (tokenization is not
timed here: benchmarks/prefix_tokens.py times the whole path, from the traffic's lines).
"""

from __future__ import annotations

import random
import statistics
import sys
import time

from mmpool_cli.caches.prefix import Blocks, PrefixRequest, Radix, never_evicts, run


def traffic(n: int, seed: int = 0) -> list[PrefixRequest]:
    """``n`` requests of seeded multi-turn chats, in arrival order (times in ns)."""
    rng = random.Random(seed)
    systems = [tuple(rng.randrange(10, 150_000) for _ in range(rng.randrange(20, 60))) for _ in range(16)]
    images = [(rng.getrandbits(63), rng.choice((16, 64, 100))) for _ in range(2000)]
    chats: list[tuple[tuple[int, ...], tuple[tuple[int, int, str], ...]] | None] = [None] * 256
    out: list[PrefixRequest] = []
    t = 0
    while len(out) < n:
        c = rng.randrange(len(chats))
        state = chats[c]
        toks, extra = state if state is not None else (systems[c % len(systems)], ())
        add = [rng.randrange(10, 150_000) for _ in range(rng.randrange(4, 24))]
        new_extra = list(extra)
        if rng.random() < 0.2:
            for _ in range(rng.randrange(1, 3)):
                h, ln = rng.choice(images)
                start = len(toks) + len(add)
                new_extra.append((start, ln, f"{h:016x}"))
                add += [1_000_000 + h % (1 << 40)] * ln
        prompt = toks + tuple(add)
        reply = tuple(rng.randrange(10, 150_000) for _ in range(rng.randrange(5, 40)))
        life = rng.randrange(1_000_000_000, 20_000_000_000)
        out.append(PrefixRequest(prompt, reply, tuple(new_extra), arrive=t, finish=t + life))
        # the next turn re-sends this one; a chat past 110 tokens starts over
        chats[c] = None if len(prompt) > 110 else (prompt + reply, tuple(new_extra))
        t += rng.randrange(0, 300_000_000)
    return out


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 100_000
    seed = int(sys.argv[2]) if len(sys.argv) > 2 else 0
    reqs = traffic(n, seed)
    tokens = sum(len(r.tokens) for r in reqs)
    print(f"{n:,} requests, {tokens:,} prompt tokens")
    for name, kind in (("radix (SGLang)", Radix), ("blocks (vLLM)", Blocks)):
        top = never_evicts(reqs, kind)
        cache = kind(top // 2)
        times = []
        cpu = []
        for _ in range(3):
            start, start_cpu = time.perf_counter(), time.process_time()
            got = run(reqs, cache)
            times.append(time.perf_counter() - start)
            cpu.append(time.process_time() - start_cpu)
        print(
            f"{name}: median {statistics.median(times):.2f} s of {', '.join(f'{x:.2f}' for x in times)} "
            f"(CPU {statistics.median(cpu):.2f} s) at {cache}: {sum(got.served):,} tokens served; "
            f"never evicts from {top:,}"
        )


if __name__ == "__main__":
    main()
