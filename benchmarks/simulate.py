"""Simulator speed: mmpool's replay against SGLang 0.5.23's own allocator methods, same events.

Builds a seeded trace of about a million events (features of mixed image sizes, Poisson
arrivals, deferred leases held for an exponential time, W tokenizer workers), then times:

* mmpool's engine on the in-memory events (``simulate``), best of ``--runs``;
* mmpool reading the same trace from a JSON-lines file (``read_trace``);
* the whole process, file to answer: ``mmpool simulate --trace FILE --format json`` in a fresh
  Python (its CPU time: the events per second it achieves, and that against SGLang's loop);
* with ``--search``, the whole process of ``mmpool simulate --trace FILE --smallest-budget``
  (wall time: the search runs on every core);
* SGLang's ``_allocate_locked`` / ``_release_locked`` / ``_merge_ranges_locked`` replaying the
  events with a tick every interval (``sglang_allocator.replay``; downloads the wheel once).

Times are CPU seconds of this process. It also checks that both give the same offset for every
alloc. Usage::

    python benchmarks/simulate.py [--events 1000000] [--runs 3] [--skip-sglang] [--search [--search-limit 200x]]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from mmpool_cli.core.units import MiB
from mmpool_cli.engines.sglang import versions
from mmpool_cli.engines.sglang.simulation import pool_rules
from mmpool_cli.kernels import native
from mmpool_cli.pools.replay import ALLOC, FREE, PoolLayout, simulate
from mmpool_cli.traces.events import as_events
from mmpool_cli.traces.reader import read_trace

TICK = 50_000_000
# float32 [patches, 1176] pixel_values of Qwen2.5-VL-like images: 256x256 up to about 1920x1080
PATCHES = [324, 576, 1296, 2304, 3600, 5184, 8280]


def make_events(n_events: int, workers: int, seed: int, features: str = "images") -> list:
    """About ``n_events`` events: each feature one alloc and one free, in time order.

    ``images``: a few large features in flight per pool, so SGLang's free list stays short.
    ``small``: a thousand small features (audio clips, video frames) in flight per pool, so the
    free list SGLang scans on every allocation grows long.
    """
    rng = random.Random(seed)
    rate, mean_hold = (2000.0, 0.25) if features == "images" else (16000.0, 0.25)  # features/s, seconds held
    timed = []
    t = 0
    for i in range(n_events // 2):
        t += round(rng.expovariate(rate) * 1e9)
        if features == "images":
            nbytes = rng.choice(PATCHES) * 1176 * 4 + rng.randrange(0, 4) * 4704
        else:
            nbytes = rng.randint(16, 300) * 1024 + rng.randrange(0, 1024)
        ack = t + round(rng.expovariate(1 / mean_hold) * 1e9)
        timed.append((t, 2 * i, (t, ALLOC, i, nbytes, (i // 3) % workers)))
        timed.append((ack, 2 * i + 1, (ack, FREE, i, 0, 0)))
    timed.sort()
    return [e for _, _, e in timed]


def write_jsonl(events: list, path: Path) -> None:
    with path.open("w") as f:
        for t, op, key, nbytes, worker in events:
            ts = f"{t // 10**9}.{t % 10**9:09d}"
            if op == ALLOC:
                f.write(f'{{"t": {ts}, "op": "alloc", "id": "{key}", "bytes": {nbytes}, "worker": {worker}}}\n')
            else:
                f.write(f'{{"t": {ts}, "op": "free", "id": "{key}"}}\n')


def run_mmpool(args: list[str]) -> tuple[float, float, dict]:
    """``mmpool simulate ARGS`` in a fresh Python: its CPU seconds (children included), wall seconds, JSON."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "mmpool_cli", "simulate", *args], capture_output=True, text=True, check=False
    )
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode not in (0, 1):
        raise SystemExit(f"mmpool simulate failed: {done.stderr}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return cpu, wall, json.loads(done.stdout)


def best(runs: int, fn) -> tuple[float, object]:
    """The least CPU time of ``runs`` calls (CPU time: other processes on a shared machine count less)."""
    times, out = [], None
    for _ in range(runs):
        start = time.process_time()
        out = fn()
        times.append(time.process_time() - start)
    return min(times), out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--budget-mb", type=int, default=1024)
    parser.add_argument("--tp", type=int, default=2)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--features", choices=["images", "small"], default="images")
    parser.add_argument("--skip-sglang", action="store_true")
    parser.add_argument("--sglang-source", type=Path, help="an extracted memory_pool.py of the 0.5.23 wheel")
    parser.add_argument("--search", action="store_true", help="also time --smallest-budget, whole process")
    parser.add_argument("--target", default="0.01", help="the search's --target-fallback")
    parser.add_argument(
        "--search-limit",
        help="the search's --search-limit: events (2G) or whole replays (200x); mmpool's default if not given",
    )
    args = parser.parse_args()

    events = make_events(args.events, args.workers, args.seed, args.features)
    rel = versions.release(versions.NEWEST)
    header = rel.header_bytes(args.tp)
    layout = PoolLayout(args.workers, args.budget_mb * MiB // args.workers, header, TICK, pool_rules(rel))
    n = len(events)
    print(
        f"{n} events, {args.workers} workers x {layout.memory_size} B, TP {args.tp}, {n and events[-1][0] / 1e9:.0f} s"
    )

    def plain_loop() -> None:  # the least a Python replay can do per event: the machine's yardstick
        live = {}
        for t, op, key, nbytes, worker in events:
            if op:
                live.pop(key, None)
            else:
                live[key] = (worker, nbytes, t)

    floor_s, _ = best(args.runs, plain_loop)
    print(f"plain dict loop:    {floor_s:7.3f} s  {n / floor_s / 1e6:6.2f} M events/s  (this machine's yardstick)")
    columns = as_events(events)  # as read_trace returns them
    engine = "compiled" if native.FAST is not None else "pure Python (no compiled simulator)"
    seconds, result = best(args.runs, lambda: simulate(columns, layout, record=True))
    items, fallback = result.total("items"), result.total("fallback_items")
    print(f"fallback {fallback} of {items} features ({100 * fallback / items:.1f}%)")
    print(f"mmpool engine:      {seconds:7.3f} s  {n / seconds / 1e6:6.2f} M events/s  ({engine})")
    if native.FAST is not None:
        compiled, native.FAST = native.FAST, None
        pure_s, pure = best(1, lambda: simulate(columns, layout, record=True))
        native.FAST = compiled
        assert pure.offsets == result.offsets, "the compiled and pure-Python engines disagree"
        print(f"  pure Python:      {pure_s:7.3f} s  {n / pure_s / 1e6:6.2f} M events/s  (MMPOOL_PURE_PYTHON=1)")

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "trace.jsonl"
        write_jsonl(events, path)
        parse_s, parsed = best(1, lambda: read_trace(str(path), args.workers, keep_ids=False))
        assert len(parsed) == n
        print(f"mmpool read_trace:  {parse_s:7.3f} s  {n / parse_s / 1e6:6.2f} M events/s")
        # the package's bytecode, as pip install leaves it (with PYTHONDONTWRITEBYTECODE set, a
        # checkout would otherwise be compiled anew by every process timed)
        package = Path(native.__file__).resolve().parents[1]
        subprocess.run([sys.executable, "-m", "compileall", "-q", str(package)], check=True, capture_output=True)
        flags = ["--trace", str(path), "--workers", str(args.workers), "--tp", str(args.tp)]
        whole_s, _, answer = run_mmpool([*flags, "--size", f"{args.budget_mb}MiB", "--format", "json"])
        assert answer["items"]["fallback"] == fallback, "the whole process disagrees with the engine"
        print(f"whole process:      {whole_s:7.3f} s  {n / whole_s / 1e6:6.2f} M events/s  (CPU, file to answer)")
        if args.search:
            search = [*flags, "--smallest-budget", "--target-fallback", args.target, "--format", "json"]
            if args.search_limit is not None:
                search += ["--search-limit", str(args.search_limit)]
            cpu_s, wall_s, answer = run_mmpool(search)
            found = answer["smallest_budget"]
            trials = found["trials"]
            replayed = sum(t["events"] for t in trials) + n  # and the run that finds the no-miss budget
            print(
                f"--smallest-budget:  {wall_s:7.3f} s wall, {cpu_s:.3f} s CPU on {os.cpu_count()} cores: "
                f"{found['sglang_mm_feature_cache_mb']} MiB (exact: {found['exact']}, up to {found['upper_mb']}, "
                f"{len(trials)} budgets simulated, {sum(t['stopped'] for t in trials)} of them stopped past the "
                f"target; {replayed} events replayed, {replayed / n:.1f} traces' worth)"
            )

    if args.skip_sglang:
        return 0
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from sglang_allocator import load_memory_pool, replay

    module = load_memory_pool(args.sglang_source)
    sglang_s, offsets = best(1, lambda: replay(module, events, args.workers, layout.memory_size, header, TICK, args.tp))
    print(f"SGLang allocator:   {sglang_s:7.3f} s  {n / sglang_s / 1e6:6.2f} M events/s")
    print(f"engine speed-up:    {sglang_s / seconds:7.1f}x")
    print(f"whole process vs SGLang's loop: {sglang_s / whole_s:7.1f}x")
    same = offsets == result.offsets
    print(f"offsets identical:  {same}")
    return 0 if same else 1


if __name__ == "__main__":
    raise SystemExit(main())
