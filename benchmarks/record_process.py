"""What recording costs the whole process: SGLang 0.5.23's own cuda_ipc publish, in a process plain or recorded.

A maintainer script, not part of mmpool and not run in CI (NVIDIA GPU, torch, SGLang's wheel or a
folder of its files: ``record_sglang_load.py``). One run is one process: ``--blocks`` blocks of
``--rounds`` rounds, a round being SGLang's ``StreamOrderedMmFeaturePool.copy_tensor`` of a
``--mib`` MiB tensor, then the release SGLang's recycler does (``_release_locked`` and
``_merge_ranges_locked`` under the pool's lock, ``memory_pool.py:319-322``), then a synchronize.
A block is timed whole (``perf_counter_ns`` around all its rounds, and the process's CPU time, every
thread's, ``process_time_ns``), so everything the process does meanwhile, the hook's writer thread
included, is in it; the run's figures are the medians of its blocks' time per round. ``--rate N``
paces N rounds a second for ``--seconds`` instead and gives the process's CPU time (every thread)
per second of it. ``--cpu`` (no GPU) builds the pool without its GPU parts (``__new__`` and the
allocator's own fields, as ``record_hook.py`` does) and a round is ``_allocate_locked``,
``_release_locked`` and ``_merge_ranges_locked`` under the pool's lock: the hook's share of the
process where nothing else hides it.

``benchmarks/record_run.sh`` runs it ABAB: a plain run, then the same under ``mmpool record --out
DIR --``, five times each, in turn (``record_process_summary`` below prints the comparison).

Usage::

    python3 benchmarks/record_process.py --sglang WHEEL_OR_DIR --out FILE [--mib 1] [--rounds 3000]
        [--blocks 7] [--rate 0 --seconds 5]
    python3 benchmarks/record_process.py --summary FILE...
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

MiB = 1 << 20


def run(args: argparse.Namespace) -> dict:
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import torch
    from record_sglang_load import load_one_process

    ipc, _vmm, memory_pool = load_one_process(Path(args.sglang))
    if args.cpu:
        from record_hook import new_ipc_pool

        pool = new_ipc_pool(memory_pool)
        nbytes = args.mib * MiB

        def round_() -> None:
            with pool._lock:
                lease = pool._allocate_locked(nbytes)
                pool._release_locked(lease)
                pool._merge_ranges_locked()

        gpu = "none (--cpu)"
    else:
        torch.cuda.set_device(0)
        pool = ipc.MmItemMemoryPool(256 * MiB, 0.05, 0, 1)._pool
        tensor = torch.randint(0, 256, (args.mib * MiB,), dtype=torch.uint8, device="cuda:0").view(torch.bfloat16)
        sync = torch.cuda.current_stream().synchronize

        def round_() -> None:
            lease, _ = pool.copy_tensor(tensor)
            with pool._lock:
                pool._release_locked(lease)
                pool._merge_ranges_locked()
            sync()

        gpu = torch.cuda.get_device_name(0)
    recorded = any(getattr(v, "__wrapped__", None) is not None for v in vars(type(pool)).values())

    for _ in range(args.rounds):  # warm-up: the first event opens the recording
        round_()
    out: dict = {"recorded": recorded, "mib": args.mib, "gpu": gpu, "pid": os.getpid()}
    if args.rate:
        period = 1.0 / args.rate
        rounds = int(args.rate * args.seconds)
        cpu0, t0 = time.process_time(), time.monotonic()
        for i in range(rounds):
            delay = t0 + i * period - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            round_()
        wall = time.monotonic() - t0
        out.update(rate=args.rate, rounds=rounds, wall_s=wall, cpu_s=time.process_time() - cpu0)
        out["cpu_per_s"] = out["cpu_s"] / wall
    else:
        blocks, cpu = [], []
        for _ in range(args.blocks):
            t, c = time.perf_counter_ns(), time.process_time_ns()
            for _ in range(args.rounds):
                round_()
            blocks.append((time.perf_counter_ns() - t) / args.rounds / 1e3)
            cpu.append((time.process_time_ns() - c) / args.rounds / 1e3)
        out.update(rounds=args.rounds, blocks_us=blocks, round_us=statistics.median(blocks))
        out.update(cpu_blocks_us=cpu, round_cpu_us=statistics.median(cpu))
    if not args.cpu:
        pool.shutdown()
    return out


def summary(paths: list[str]) -> dict:
    """Plain against recorded, from the runs' files: medians of the runs' figures, and per event (two a round)."""
    runs = [json.loads(Path(p).read_text()) for p in paths]
    report: dict = {}
    for key in sorted({(r["mib"], r.get("rate", 0)) for r in runs}):
        same = [r for r in runs if (r["mib"], r.get("rate", 0)) == key]
        field = "cpu_per_s" if key[1] else "round_us"
        plain = [r[field] for r in same if not r["recorded"]]
        rec = [r[field] for r in same if r["recorded"]]
        if not plain or not rec:
            continue
        a, b = statistics.median(plain), statistics.median(rec)
        name = f"{key[0]} MiB" + (f" at {key[1]} rounds/s" if key[1] else "")
        row = {"plain": plain, "recorded": rec, "plain_median": a, "recorded_median": b}
        if key[1]:
            row["added_cpu_pct"] = round(100 * (b - a), 3)  # CPU seconds per wall second, as a percentage
        else:
            row["added_per_event_us"] = round((b - a) / 2, 3)
            row["added_pct"] = round(100 * (b - a) / a, 2)
            cpu_a = statistics.median(r["round_cpu_us"] for r in same if not r["recorded"])
            cpu_b = statistics.median(r["round_cpu_us"] for r in same if r["recorded"])
            row["cpu_plain_median"], row["cpu_recorded_median"] = cpu_a, cpu_b
            row["added_cpu_per_event_us"] = round((cpu_b - cpu_a) / 2, 3)  # every thread's CPU time
        report[name] = row
    return report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sglang")
    parser.add_argument("--out")
    parser.add_argument("--mib", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=3000)
    parser.add_argument("--blocks", type=int, default=7)
    parser.add_argument("--rate", type=int, default=0, help="rounds a second (0: as fast as it goes)")
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--cpu", action="store_true", help="no GPU: the allocator's calls alone")
    parser.add_argument("--summary", nargs="+", help="the runs' files: print plain against recorded")
    args = parser.parse_args(argv)
    if args.summary:
        print(json.dumps(summary(args.summary), indent=1))
        return 0
    if not args.sglang or not args.out:
        parser.error("--sglang and --out, or --summary")
    result = run(args)
    Path(args.out).write_text(json.dumps(result) + "\n")
    print(json.dumps({k: v for k, v in result.items() if k != "blocks_us"}), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
