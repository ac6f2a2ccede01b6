"""Record the offsets SGLang 0.5.23's own allocator gives on seeded traces, as a test fixture.

A maintainer script, not run in CI (it downloads the SGLang wheel and needs torch, CPU is enough;
see ``sglang_allocator``: SGLang's allocator and recycle methods run unmodified).
It writes JSON-lines traces and the offsets SGLang's ``_allocate_locked`` returned for each
alloc to ``tests/simulate/data/sglang-0.5.23/``; ``tests/simulate/test_sglang_fixture.py``
replays the same traces through mmpool and compares, offline. Usage::

    python benchmarks/record_sglang_offsets.py
"""

from __future__ import annotations

import json
import random
from pathlib import Path

from sglang_allocator import SGLANG_VERSION, load_memory_pool, replay

OUT = Path(__file__).resolve().parent.parent / "tests" / "simulate" / "data" / f"sglang-{SGLANG_VERSION}"
TICK = 50_000_000
STEPS_NS = [0, 0, 1, 10_000_000, 25_000_000, TICK, TICK, 60_000_000, 120_000_000]


def header(consumers: int) -> int:
    return 4096 * (1 + consumers) * 4


def random_case(rng: random.Random, events: int) -> dict:
    workers = rng.randint(1, 3)
    consumers = rng.choice([1, 2, 4, 8])
    usable = rng.randint(1, 8) * 131_072 + rng.randrange(0, 4096)
    trace, live, t = [], [], 0
    for i in range(events):
        t += rng.choice(STEPS_NS)
        if live and rng.random() < 0.45:
            trace.append((t, 1, live.pop(rng.randrange(len(live))), 0, 0))
        else:
            nbytes = rng.choice([rng.randint(1, 4096), rng.randint(1, 70_000), rng.randint(1, 300_000)])
            trace.append((t, 0, f"r{i}", nbytes, rng.randrange(workers)))
            live.append(f"r{i}")
    return {"workers": workers, "consumers": consumers, "memory_size": header(consumers) + usable, "trace": trace}


def slot_cap_case() -> dict:
    # 4100 small features on one worker with room for all: the 4097th misses on the slot cap,
    # then a tick gives 10 back
    trace = [(0, 0, f"a{i}", 256, 0) for i in range(4100)]
    trace += [(1, 1, f"a{i}", 0, 0) for i in range(10)]
    trace += [(TICK + 1, 0, f"b{i}", 100, 0) for i in range(12)]
    return {"workers": 1, "consumers": 1, "memory_size": header(1) + 8 * 1024 * 1024, "trace": trace}


def seconds(ns: int) -> str:
    return f"{ns // 10**9}.{ns % 10**9:09d}"


def write_trace(path: Path, trace: list) -> None:
    lines = []
    for t, op, key, nbytes, worker in trace:
        if op == 0:
            lines.append(f'{{"t": {seconds(t)}, "op": "alloc", "id": "{key}", "bytes": {nbytes}, "worker": {worker}}}')
        else:
            lines.append(f'{{"t": {seconds(t)}, "op": "free", "id": "{key}"}}')
    path.write_text("\n".join(lines) + "\n")


def main() -> None:
    module = load_memory_pool()
    rng = random.Random(20261203)
    cases = [random_case(rng, 400) for _ in range(16)] + [slot_cap_case()]
    OUT.mkdir(parents=True, exist_ok=True)
    index = []
    for n, case in enumerate(cases):
        offsets = replay(
            module,
            case["trace"],
            case["workers"],
            case["memory_size"],
            header(case["consumers"]),
            TICK,
            case["consumers"],
            real_recycle=True,
        )
        name = f"case-{n:02d}.jsonl"
        write_trace(OUT / name, case["trace"])
        misses = offsets.count(None)
        index.append(
            {
                "trace": name,
                "workers": case["workers"],
                "consumers": case["consumers"],
                "memory_size": case["memory_size"],
                "recycle_interval_ns": TICK,
                "offsets": offsets,
            }
        )
        print(f"{name}: {len(offsets)} allocs, {misses} misses")
    (OUT / "offsets.json").write_text(json.dumps({"sglang_version": SGLANG_VERSION, "cases": index}) + "\n")


if __name__ == "__main__":
    main()
