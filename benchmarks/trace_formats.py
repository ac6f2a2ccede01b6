"""A columnar trace against JSON lines: the whole process, file to answer, on one core.

Writes the ``images`` trace of ``benchmarks/simulate.py`` (Poisson arrivals at 2000 features/s,
exponential holds of 0.25 s, Qwen2.5-VL-like image sizes, 4 workers; made with numpy here, so that
10^7 events take seconds) as JSON lines and as Parquet: its ids, all integers, stored as integers
(as ``mmpool trace -o`` stores them) and as text (as ids that are not all integers are). Checks that
``mmpool simulate --trace`` gives the same answer from each, and times each: CPU seconds of a fresh
process pinned to one core, its wall time and peak memory, best of ``--runs``. Usage::

    python benchmarks/trace_formats.py [--events 10000000] [--runs 3] [--keep DIR] [--formats parquet,parquet-text]

(without ``jsonl`` for 10^8 events: that JSON-lines file is about 7 GB.)
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from mmpool_cli.traces.parquet_writer import integer_ids, required, write_options

PATCHES = np.array([324, 576, 1296, 2304, 3600, 5184, 8280])
ROOT = Path(__file__).resolve().parents[1]


def make(n_events: int, workers: int, seed: int) -> dict[str, np.ndarray]:
    """The trace's columns in time order (an alloc before a free of the same t, by their order)."""
    rng = np.random.default_rng(seed)
    n = n_events // 2
    t = np.cumsum(np.round(rng.exponential(1 / 2000.0, n) * 1e9).astype(np.int64))
    nbytes = rng.choice(PATCHES, n) * 1176 * 4 + rng.integers(0, 4, n) * 4704
    ack = t + np.round(rng.exponential(0.25, n) * 1e9).astype(np.int64)
    times = np.concatenate([t, ack])
    seq = np.concatenate([2 * np.arange(n), 2 * np.arange(n) + 1])
    order = np.lexsort((seq, times))
    ident = np.concatenate([np.arange(n), np.arange(n)])[order]
    is_free = (seq[order] & 1).astype(bool)
    worker = ((ident // 3) % workers).astype(np.int64)
    return {
        "t": times[order],
        "free": is_free,
        "id": ident,
        "bytes": np.concatenate([nbytes, nbytes])[order],
        "worker": worker,
    }


def write_jsonl(c: dict[str, np.ndarray], path: Path) -> None:
    with path.open("w") as f:
        step = 1 << 20
        for a in range(0, len(c["t"]), step):
            rows = zip(*(c[k][a : a + step].tolist() for k in ("t", "free", "id", "bytes", "worker")), strict=True)
            f.write(
                "".join(
                    f'{{"t": {t // 10**9}.{t % 10**9:09d}, "op": "free", "id": "{i}"}}\n'
                    if free
                    else f'{{"t": {t // 10**9}.{t % 10**9:09d}, "op": "alloc", "id": "{i}", '
                    f'"bytes": {b}, "worker": {w}}}\n'
                    for t, free, i, b, w in rows
                )
            )


def write_parquet(c: dict[str, np.ndarray], path: Path, numeric_ids: bool) -> None:
    free = c["free"]
    assert integer_ids([str(i) for i in c["id"][:1000]]) is not None  # mmpool trace would write them as integers
    table = pa.table(
        {
            "t_ns": pa.array(c["t"]),
            "op": pa.DictionaryArray.from_arrays(pa.array(free.astype(np.int32)), pa.array(["alloc", "free"])),
            "id": pa.array(c["id"]) if numeric_ids else pa.array(c["id"]).cast(pa.string()),
            "bytes": pa.array(c["bytes"]),  # a free's as its alloc's, as mmpool trace writes them
            "worker": pa.array(c["worker"].astype(np.int32)),
        }  # and no item column: with no item named, mmpool trace writes none
    )
    pq.write_table(required(pa, table), path, **write_options(numeric_ids=numeric_ids))  # as mmpool trace writes it


# Runs the command pinned to the first core this process may use and writes its CPU seconds and peak
# RSS to the file named first. Started afresh, it is small when it forks the command: a command forked
# from this process would count this process's memory at the fork (its columns, pyarrow's pool) in its peak.
LAUNCHER = """
import os, sys
os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})
pid = os.fork()
if pid == 0:
    os.execvp(sys.argv[2], sys.argv[2:])
_, status, usage = os.wait4(pid, 0)
with open(sys.argv[1], "w") as f:
    f.write(f"{usage.ru_utime} {usage.ru_stime} {usage.ru_maxrss}")
sys.exit(os.waitstatus_to_exitcode(status))
"""


def run(trace: Path, runs: int, n: int, root: Path = ROOT) -> tuple[float, float, int, dict]:
    """Best CPU seconds, wall seconds and peak RSS (KB) of ``mmpool simulate --trace`` on one core, and
    its answer."""
    best = (float("inf"), float("inf"), 0, {})
    for _ in range(runs):
        with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err, tempfile.NamedTemporaryFile() as usage:
            command = [sys.executable, "-c", LAUNCHER, usage.name, sys.executable, "-m", "mmpool_cli", "simulate"]
            command += ["--trace", str(trace), "--workers", "4", "--tp", "2", "--format", "json"]
            command += ["--max-events", str(max(n, 10_000_000))]
            start = time.perf_counter()
            process = subprocess.run(command, cwd=root, stdout=out, stderr=err)
            wall = time.perf_counter() - start
            out.seek(0)
            err.seek(0)
            assert process.returncode in (0, 1), err.read().decode()
            user, system, rss = Path(usage.name).read_text().split()
            cpu = float(user) + float(system)
            if cpu < best[0]:
                best = (cpu, wall, int(rss), json.loads(out.read()))
    return best


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=10_000_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--keep", type=Path, help="write the traces here and keep them")
    parser.add_argument(
        "--formats",
        default="jsonl,parquet,parquet-text",
        help="which to measure, comma-separated: jsonl, parquet (integer ids, as mmpool trace writes this "
        "trace's), parquet-text (the same ids as text, as for ids that are not all integers)",
    )
    parser.add_argument(
        "--root",
        type=Path,
        default=ROOT,
        help="run the mmpool_cli of this checkout (an earlier commit, built in place)",
    )
    args = parser.parse_args()
    folder = args.keep or Path(tempfile.mkdtemp(prefix="mmpool-formats-"))
    folder.mkdir(parents=True, exist_ok=True)
    try:
        columns = make(args.events, 4, args.seed)
        n = len(columns["t"])
        formats = args.formats.split(",")
        known = {
            "jsonl": ("JSON lines", folder / "images.jsonl"),
            "parquet": ("Parquet", folder / "images.parquet"),
            "parquet-text": ("Parquet, text ids", folder / "images-text-ids.parquet"),
        }
        if unknown := set(formats) - set(known):
            parser.error(f"--formats: unknown {', '.join(sorted(unknown))}; known: {', '.join(known)}")
        paths = dict(known[f] for f in known if f in formats)
        for key, (name, path) in known.items():
            if name not in paths or path.exists():
                continue
            if key == "jsonl":
                write_jsonl(columns, path)
            else:
                write_parquet(columns, path, numeric_ids=key == "parquet")
        del columns  # the memory is the replay's
        subprocess.run([sys.executable, "-m", "compileall", "-q", str(args.root / "mmpool_cli")], check=True)
        answers = []
        print(f"{n:,} events; mmpool simulate --trace FILE --workers 4 --tp 2 --format json, on one core ({args.root})")
        for name, path in paths.items():
            cpu, wall, rss, answer = run(path, args.runs, n, args.root)
            answer["source"] = None
            answers.append(answer)
            size = os.path.getsize(path) / 1e6
            print(
                f"{name:17}  {size:8.0f} MB  {cpu:7.2f} s CPU  {wall:7.2f} s wall  "
                f"{n / cpu / 1e6:6.2f} M events/s  peak {rss / 1e3:.0f} MB"
            )
        if len(answers) > 1:
            assert all(a == answers[0] for a in answers), "the formats give different answers"
            print("the same answer from each")
    finally:
        if args.keep is None:
            shutil.rmtree(folder)
    return 0


if __name__ == "__main__":
    sys.exit(main())
