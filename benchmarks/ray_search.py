"""The ``images`` safe search on Ray: a proven answer, the scaling from 1 to N CPUs, Ray's cost per trial.

Builds the ``images`` trace of ``benchmarks/simulate.py`` (``--events``, 10^6 by default), runs
``mmpool simulate --trace FILE --workers 4 --tp 2 --smallest-budget --target-fallback 0.01`` with
the local executor, then with ``--executor ray`` on a Ray cluster of this machine started for each
CPU count of ``--cpus`` (one node, ``ray start --head --num-cpus N``, ended by its process id), and
checks that every run prints the same JSON. Ray's cost per trial: a small trace's search (every
trial short) on one Ray CPU against the local executor on one core. Usage::

    python benchmarks/ray_search.py [--events 1000000] [--cpus 1,2] [--search-limit 1T]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "benchmarks")]

from simulate import make_events, write_jsonl  # noqa: E402

from tests.pools import ray_cluster  # noqa: E402


def search(trace: Path, limit: str, *more: str, cores: str | None = None) -> tuple[float, float, bytes]:
    """Wall and CPU seconds (this process and its children) of one search, and its JSON."""
    command = [sys.executable, "-m", "mmpool_cli", "simulate", "--trace", str(trace), "--workers", "4", "--tp", "2"]
    command += ["--smallest-budget", "--target-fallback", "0.01", "--search-limit", limit, "--format", "json", *more]
    if cores is not None:
        command = ["taskset", "-c", cores, *command]
    start = time.perf_counter()
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        process = subprocess.Popen(command, cwd=ROOT, env=ray_cluster.env(), stdout=out, stderr=err)
        _, status, usage = os.wait4(process.pid, 0)
        wall = time.perf_counter() - start
        out.seek(0)
        err.seek(0)
        assert os.waitstatus_to_exitcode(status) in (0, 1), err.read().decode()[-2000:]
        return wall, usage.ru_utime + usage.ru_stime, out.read()


def summary(answer: bytes) -> str:
    s = json.loads(answer)["smallest_budget"]
    proven = "proven" if s["exact"] else "NOT proven"
    return (
        f"{s['sglang_mm_feature_cache_mb']} MiB {proven}, {len(s['trials'])} trials "
        f"({sum(t['stopped'] for t in s['trials'])} stopped), {s['replayed_events']:,} events replayed"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--small", type=int, default=2000, help="the events of the trace that measures Ray's cost")
    parser.add_argument("--cpus", default="1,2")
    parser.add_argument("--search-limit", default="1T", help="high enough for a proven answer")
    parser.add_argument("--skip-local", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        big, small = folder / "images.jsonl", folder / "small.jsonl"
        write_jsonl(make_events(args.events, 4, 1, "images"), big)
        write_jsonl(make_events(args.small, 4, 1, "images"), small)
        print(f"images trace of {args.events:,} events, 4 workers, TP 2, target 1%; {os.cpu_count()} cores here")
        answers = {}
        if not args.skip_local:
            wall, cpu, answers["local"] = search(big, args.search_limit)
            print(f"local executor, every core: {wall:8.1f} s wall, {cpu:8.1f} s CPU: {summary(answers['local'])}")
        small_local = search(small, args.search_limit, cores="0")
        for cpus in [int(c) for c in args.cpus.split(",")]:
            with ray_cluster.cluster(folder / f"ray{cpus}", nodes=1, cpus=cpus) as made:
                on = ["--executor", "ray", "--ray-address", made.address]
                wall, cpu, answers[f"ray{cpus}"] = search(big, args.search_limit, *on)
                print(f"Ray, {cpus} CPU(s):             {wall:8.1f} s wall: {summary(answers[f'ray{cpus}'])}")
                if cpus == 1:
                    small_wall, _, small_answer = search(small, args.search_limit, *on)
                    assert small_answer == small_local[2]
                    trials = len(json.loads(small_answer)["smallest_budget"]["trials"])
                    start = time.perf_counter()
                    search(small, args.search_limit, "--search", "bisect", *on)  # connecting, a few tasks
                    fixed = time.perf_counter() - start
                    per = (small_wall - fixed - small_local[0]) / trials
                    print(
                        f"  Ray's cost: {fixed:.1f} s to connect and start; {small_wall:.1f} s against "
                        f"{small_local[0]:.1f} s local for the {args.small:,}-event search's {trials} trials: "
                        f"about {per * 1e3:.2f} ms a trial"
                    )
        first = next(iter(answers.values()))
        assert all(a == first for a in answers.values()), "the executors give different answers"
        print(f"the same JSON from every run ({', '.join(answers)})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
