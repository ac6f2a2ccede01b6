"""Start-up benchmark: `mmpool <command>` against importing mmpool's own dependencies.

Runs each command many times in fresh processes and compares medians. The floor is
``python -c "import typer, pydantic, rich, yaml"``: what any CLI on this stack pays before
doing anything. Usage::

    python benchmarks/startup.py [--runs 30] [--python PATH] [--mmpool PATH]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import time

FLOOR = "import typer, pydantic, rich, yaml"


def median_seconds(cmd: list[str], runs: int, env: dict[str, str]) -> float:
    """Median wall time of ``runs`` fresh runs of ``cmd`` (one warm-up run first)."""
    subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env, check=False)
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env, check=False)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--python", default=sys.executable)
    parser.add_argument("--mmpool", default=shutil.which("mmpool") or "mmpool")
    parser.add_argument("--goal", type=float, default=1.15, help="largest acceptable ratio to the floor")
    parser.add_argument("extra", nargs="*", help="more mmpool argument lists, each as one quoted string")
    args = parser.parse_args()

    env = {k: v for k, v in os.environ.items() if not k.startswith(("SGLANG_", "SGL_"))}
    cases = {
        "floor: python -c pass": [args.python, "-c", "pass"],
        f"floor: {FLOOR}": [args.python, "-c", FLOOR],
        "mmpool plan --format json": [args.mmpool, "plan", "--format", "json"],
        "mmpool plan (human)": [args.mmpool, "plan"],
    }
    for extra in args.extra:
        cases[f"mmpool {extra}"] = [args.mmpool, *extra.split()]
    results = {name: median_seconds(cmd, args.runs, env) for name, cmd in cases.items()}
    floor = results[f"floor: {FLOOR}"]
    print(f"median of {args.runs} runs, Python {sys.version.split()[0]}, {os.cpu_count()} CPUs")
    print(f"{'command':<52} {'median':>9} {'x floor':>8}")
    for name, seconds in results.items():
        print(f"{name:<52} {seconds * 1000:>7.0f}ms {seconds / floor:>8.2f}")
    # The goal is set for the scripted path; human output also loads rich's console and tables.
    ratio = results["mmpool plan --format json"] / floor
    verdict = "meets" if ratio <= args.goal else "misses"
    print(f"mmpool plan --format json at {ratio:.2f}x the floor: {verdict} the goal of {args.goal:.2f}x")
    return 0 if ratio <= args.goal else 1


if __name__ == "__main__":
    raise SystemExit(main())
