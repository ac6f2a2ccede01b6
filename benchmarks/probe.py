"""Probe benchmark, run on the GPU machine: NVML read time, full-probe wall time, verification bandwidth.

Usage: python benchmarks/probe.py [--runs 3] [--out DIR]
Prints a table and writes probe-benchmark.json (and each probe's report) to --out.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

NVML_READ = (
    "import time, os; t = time.perf_counter()\n"
    "from mmpool_cli.probe.devices import read_nvml; d = read_nvml()\n"
    "t = time.perf_counter() - t\n"
    "import pynvml; pynvml.nvmlInit()\n"
    "pids = {p.pid for i in range(pynvml.nvmlDeviceGetCount()) for p in "
    "pynvml.nvmlDeviceGetComputeRunningProcesses(pynvml.nvmlDeviceGetHandleByIndex(i))}\n"
    "print(t, os.getpid() in pids)"
)


def run(cmd: list[str]) -> tuple[float, subprocess.CompletedProcess[str]]:
    start = time.perf_counter()
    done = subprocess.run(cmd, capture_output=True, text=True, check=False)
    return time.perf_counter() - start, done


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", ".")))
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    py = sys.executable
    results: dict[str, object] = {}

    in_process, wall, contexts = [], [], []
    for _ in range(10):
        seconds, done = run([py, "-c", NVML_READ])
        read, has_context = done.stdout.split()
        in_process.append(float(read))
        wall.append(seconds)
        contexts.append(has_context == "True")
    results["nvml_read_seconds_median"] = statistics.median(in_process)
    results["nvml_process_wall_seconds_median"] = statistics.median(wall)
    results["nvml_created_a_context"] = any(contexts)

    cases = {
        "defaults": [],
        "4x256MiB_tp8": ["--size", "1GiB", "--workers", "4", "--tp", "8"],
    }
    for name, flags in cases.items():
        walls, reports = [], []
        for i in range(args.runs):
            seconds, done = run([py, "-m", "mmpool_cli", "probe", "--format", "json", *flags])
            walls.append(seconds)
            report = (
                json.loads(done.stdout) if done.stdout else {"status": f"rc={done.returncode}", "stderr": done.stderr}
            )
            reports.append(report)
            (args.out / f"probe-{name}-{i}.json").write_text(json.dumps(report, indent=2))
        allocate = [next(s for s in r.get("stages", []) if s["name"] == "allocate") for r in reports if "stages" in r]
        results[name] = {
            "status": [r["status"] for r in reports],
            "wall_seconds": walls,
            "wall_seconds_median": statistics.median(walls),
            "verify_to_copy": [a["figures"].get("verify_to_copy") for a in allocate],
            "verify_gbps": [a["figures"].get("verify_gbps") for a in allocate],
            "copy_gbps": [a["figures"].get("copy_gbps") for a in allocate],
            "probe_seconds": [r.get("seconds") for r in reports],
            "torch_import_seconds": [a["figures"].get("torch_import_seconds") for a in allocate],
            "fork_seconds": [a["figures"].get("fork_seconds") for a in allocate],
            "step_seconds": [a["figures"].get("step_seconds") for a in allocate],
            "stage_seconds": [
                {s["name"]: s["seconds"] and round(s["seconds"], 3) for s in r.get("stages", [])} for r in reports
            ],
            "context_bytes_per_process": [a["figures"].get("context_bytes_per_process") for a in allocate],
            "reserved_bytes_per_worker": [a["figures"].get("reserved_bytes_per_worker") for a in allocate],
        }
    (args.out / "probe-benchmark.json").write_text(json.dumps(results, indent=2))
    print(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
