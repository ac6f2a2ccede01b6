"""Record the offsets SGLang 0.5.23's own allocators give on seeded traces, as test fixtures.

A maintainer script, not run in CI (it downloads the SGLang wheel and needs torch, CPU is enough;
see ``sglang_allocator`` and ``sglang_vmm_allocator``: SGLang's allocator and recycle methods run
unmodified). It writes JSON-lines traces and the offsets SGLang gave each alloc to
``tests/pools/data/sglang-0.5.23/`` (cuda_ipc: ``_allocate_locked``'s lease starts) and its
``vmm/`` folder (cuda_vmm: each tensor's ``data_offset`` from ``wrap_items``);
``tests/pools/test_sglang_fixture.py`` replays the same traces through mmpool and compares,
offline. Usage::

    python benchmarks/record_sglang_offsets.py [--vmm-only]
"""

from __future__ import annotations

import json
import random
import sys
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


def vmm_case(rng: random.Random, requests: int) -> dict:
    workers = rng.randint(1, 3)
    consumers = rng.choice([1, 2, 4, 8])
    granularity = rng.choice([4096, 65536])
    per_worker = rng.randint(2, 24) * 65536 + rng.randrange(0, 65536)
    trace, live, meta, t = [], [], {}, 0
    for r in range(requests):
        t += rng.choice(STEPS_NS)
        while live and rng.random() < 0.5:
            trace.append((t, 1, live.pop(rng.randrange(len(live))), 0, 0))
        worker = rng.randrange(workers)
        for j in range(rng.choice([1, 1, 2, 2, 3, 4])):
            elem = rng.choice([1, 2, 4, 4])
            nbytes = elem * rng.choice([rng.randint(1, 1024), rng.randint(1, 20_000), rng.randint(1, 90_000)])
            key = f"r{r}/t{j}"
            trace.append((t, 0, key, nbytes, worker))
            meta[key] = (f"r{r}", elem, rng.random() < 0.8)
            live.append(key)
    return {
        "workers": workers,
        "consumers": consumers,
        "granularity": granularity,
        "per_worker": per_worker,
        "trace": trace,
        "meta": meta,
    }


def record_vmm() -> None:
    from sglang_vmm_allocator import load_vmm_transport
    from sglang_vmm_allocator import replay as replay_vmm

    module = load_vmm_transport()
    rng = random.Random(20261204)
    out = OUT / "vmm"
    out.mkdir(parents=True, exist_ok=True)
    index = []
    for n in range(16):
        case = vmm_case(rng, 160)
        offsets = replay_vmm(
            module,
            case["trace"],
            case["meta"],
            case["workers"],
            case["per_worker"],
            case["granularity"],
            case["consumers"],
            TICK,
        )
        name = f"vmm-{n:02d}.jsonl"
        write_trace(out / name, case["trace"])
        allocs = [e for e in case["trace"] if e[1] == 0]
        index.append(
            {
                "trace": name,
                "workers": case["workers"],
                "consumers": case["consumers"],
                "granularity": case["granularity"],
                "per_worker": case["per_worker"],
                "recycle_interval_ns": TICK,
                "element_sizes": [case["meta"][e[2]][1] for e in allocs],
                "visual": [case["meta"][e[2]][2] for e in allocs],
                "offsets": offsets,
            }
        )
        print(f"{name}: {len(offsets)} allocs, {offsets.count(None)} misses")
    (out / "offsets.json").write_text(json.dumps({"sglang_version": SGLANG_VERSION, "cases": index}) + "\n")


def main() -> None:
    record_vmm()
    if "--vmm-only" in sys.argv:
        return
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
