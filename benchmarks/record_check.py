"""Replay GPU recordings with ``mmpool simulate`` and compare every decision with SGLang's own answers.

A maintainer script (no GPU needed). ``RESULTS`` holds, per run of ``record_gpu.py``, the recording
``rec-T-B/`` that ``mmpool record`` wrote and the harness's ground truth ``truth-T-B/`` (every
lease's offset or miss as SGLang returned it, ``worker-N.jsonl``, with the producer's pid). For
each pair it runs::

    python -m mmpool_cli simulate --trace rec-T-B --events --format json \\
        --size B MiB --workers W --tp C --transport T

(``SGLANG_MM_ITEM_MEM_POOL_RECYCLE_INTERVAL_SEC`` set to the recording's interval), maps each
replayed event (``pid-pool:serial``) to the serial-th lease of that pid in the ground truth, and
counts the offsets and misses that differ: the replay against SGLang, and the recording's own
``offset`` against SGLang. It also gives the lease lifetimes the recording shows (alloc to the
recycler tick that gave the lease back, on the recording's tick clock) and the copy to
acknowledgement delays the harness measured (the producer's call to the last consumer's
acknowledgement, finished on its stream).

Usage::

    python benchmarks/record_check.py RESULTS [--out FILE]
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from mmpool_cli.traces.events import ALLOC  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent


def quantiles(values: list[float]) -> dict[str, float | int]:
    """Median, p90 and p99 (ms) of ``values`` (seconds)."""
    if not values:
        return {"n": 0}
    v = sorted(values)

    def q(p: float) -> float:
        return round(1e3 * v[min(len(v) - 1, int(p * len(v)))], 2)

    return {"n": len(v), "median_ms": round(1e3 * statistics.median(v), 2), "p90_ms": q(0.9), "p99_ms": q(0.99)}


def truth_of(truth: Path) -> tuple[dict, dict[int, list[dict]]]:
    run = json.loads((truth / "run.json").read_text())
    by_pid: dict[int, list[dict]] = {}
    for f in sorted(truth.glob("worker-*.jsonl")):
        for line in f.open():
            e = json.loads(line)
            by_pid.setdefault(e["pid"], []).append(e)
    return run, by_pid


def replay(rec: Path, run: dict, interval_s: float) -> dict:
    cmd = [
        sys.executable, "-m", "mmpool_cli", "simulate", "--trace", str(rec), "--events", "--format", "json",
        "--size", f"{run['budget_mib']}MiB", "--workers", str(run["workers"]), "--tp", str(run["consumers"]),
        "--transport", run["transport"],
    ]  # fmt: skip
    env = dict(os.environ, SGLANG_MM_ITEM_MEM_POOL_RECYCLE_INTERVAL_SEC=repr(interval_s))
    out = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, check=False)
    if not out.stdout.strip():
        raise SystemExit(f"{rec}: simulate gave no output (exit {out.returncode}): {out.stderr.strip()[-400:]}")
    return json.loads(out.stdout)


def pool_traces(rec: Path) -> list:
    """Each pool's trace as mmpool reads it (either format), on the pool's tick clock."""
    from mmpool_cli.traces.recording import read_pools

    return read_pools(str(rec))


def lifetimes(rec: Path) -> list[float]:
    """Alloc to release of every lease of the recording (seconds, the recording's tick clock)."""
    out = []
    for trace in pool_traces(rec):
        start = {}
        for t, op, key, _, offset in trace.events:
            if op == ALLOC and offset is not None:
                start[key] = t
            elif op != ALLOC and key in start:
                out.append((t - start.pop(key)) / 1e9)
    return out


def acks(truth: Path, by_pid: dict[int, list[dict]]) -> list[float]:
    """The producer's call to the last consumer's finished acknowledgement, per lease (seconds)."""
    last: dict[tuple[int, int, int], int] = {}
    for f in truth.glob("consumer-*.jsonl"):
        for line in f.open():
            e = json.loads(line)
            for j in e["items"]:
                key = (e["worker"], e["req"], j)
                last[key] = max(last.get(key, 0), e["t_acked_ns"])
    out = []
    for leases in by_pid.values():
        for e in leases:
            if e["offset"] is not None:
                out.append((last[(e["worker"], e["req"], e["items"][0])] - e["t_ns"]) / 1e9)
    return out


def check(rec: Path, truth: Path) -> dict:
    """The comparison of one recording with its ground truth."""
    run, by_pid = truth_of(truth)
    manifests = [json.loads(Path(m).read_text()) for m in glob.glob(str(rec / "pool-*.json"))]
    interval = manifests[0]["recycle_interval_s"]
    report = replay(rec, run, interval)
    recorded: dict[str, int | None] = {}
    for trace in pool_traces(rec):
        name = f"{trace.info['pid']}-{trace.info['pool']}"
        for _, op, key, _, offset in trace.events:
            if op == ALLOC:
                recorded[f"{name}:{key}"] = offset
    replay_differs = record_differs = 0
    events = report.get("events") or []
    for ev in events:
        name, serial = ev["id"].rsplit(":", 1)
        pid = int(name.split("-")[0])
        want = by_pid[pid][int(serial)]["offset"]
        replay_differs += ev["offset"] != want
        record_differs += recorded.get(ev["id"], "absent") != want
    leases = sum(len(v) for v in by_pid.values())
    return {
        "recording": rec.name,
        "transport": run["transport"],
        "budget_mib": run["budget_mib"],
        "pools": len(manifests),
        "sglang_leases": leases,
        "sglang_misses": sum(e["offset"] is None for v in by_pid.values() for e in v),
        "replayed_events": len(events),
        "replay_differs": replay_differs + abs(leases - len(events)),
        "recording_differs": record_differs,
        "findings": [f["code"] for f in report.get("findings", []) if f["code"].startswith("record-")],
        "dropped": sum(m.get("dropped", 0) for m in manifests),
        "lifetime": quantiles(lifetimes(rec)),
        "copy_to_ack": quantiles(acks(truth, by_pid)),
        "checksum_mismatches": run.get("checksum_mismatches"),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("results", type=Path)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    rows = []
    for rec in sorted(args.results.glob("rec-cuda_*")):
        truth = args.results / rec.name.replace("rec-", "truth-", 1)
        if truth.is_dir():
            rows.append(check(rec, truth))
            print(json.dumps(rows[-1]), flush=True)
    if args.out:
        args.out.write_text(json.dumps(rows, indent=1) + "\n")
    return 0 if rows and all(r["replay_differs"] == 0 and r["recording_differs"] == 0 for r in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
