"""Benchmark: `mmpool validate` over 1,000 files in one call, and `mmpool check` start-up.

Generates 1,000 config files in a temporary folder (mmpool configs and SGLang --config files,
a tenth of them with mistakes), times one `mmpool validate` call over all of them, and times
`mmpool check` against the dependency floor `python -c "import typer, pydantic, rich, yaml"`.
Medians of fresh processes. Usage::

    python benchmarks/validate.py [--runs 7] [--files 1000] [--mmpool PATH]
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile

from startup import FLOOR, median_seconds  # the sibling script: same timing, same floor

GOAL_S = 2.0

MMPOOL = (
    "pool:\n  size: {mb}MiB\n  tokenizer_workers: {w}\nparallel:\n  tp: 8\nworkload:\n  feature_sizes: [50633856]\n"
)
SGLANG = (
    "model-path: Qwen/Qwen2.5-VL-7B-Instruct\ntp-size: 8\ntokenizer-worker-num: {w}\nmm-feature-transport: cuda_ipc\n"
)
BAD_MMPOOL = "pool:\n  size: 1Gb\n  tokenizer_wrkers: 4\n"
BAD_SGLANG = "model-path: m\ntokenizer_worker_num: 4\nmm-feature-transport: null\n"


def make_files(folder: str, count: int) -> list[str]:
    """``count`` config files: half mmpool, half SGLang, every tenth one invalid."""
    paths = []
    for n in range(count):
        bad = n % 10 == 9
        if n % 2:
            text = BAD_SGLANG if bad else SGLANG.format(w=1 + n % 8)
        else:
            text = BAD_MMPOOL if bad else MMPOOL.format(mb=512 + n, w=1 + n % 8)
        path = os.path.join(folder, f"c{n:04d}.yaml")
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)
        paths.append(path)
    return paths


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--startup-runs", type=int, default=30)
    parser.add_argument("--files", type=int, default=1000)
    parser.add_argument("--python", default=sys.executable)
    parser.add_argument("--mmpool", default=shutil.which("mmpool") or "mmpool")
    args = parser.parse_args()

    env = {k: v for k, v in os.environ.items() if not k.startswith(("SGLANG_", "SGL_"))}
    launch = ["--", "python", "-m", "sglang.launch_server", "--model-path", "m", "--tp", "8",
              "--tokenizer-worker-num", "4", "--mm-feature-transport", "cuda_ipc"]  # fmt: skip
    print(f"Python {sys.version.split()[0]}, {os.cpu_count()} CPUs")
    with tempfile.TemporaryDirectory() as folder:
        paths = make_files(folder, args.files)
        for fmt in ("json", "human", "github"):
            seconds = median_seconds([args.mmpool, "validate", "--format", fmt, *paths], args.runs, env)
            verdict = "meets" if seconds <= GOAL_S else "misses"
            print(f"validate {args.files} files --format {fmt:<7} {seconds * 1000:7.0f}ms  ({verdict} {GOAL_S:.0f} s)")
    floor = median_seconds([args.python, "-c", FLOOR], args.startup_runs, env)
    print(f"floor: {FLOOR:<40} {floor * 1000:7.0f}ms")
    for fmt in ("json", "human"):
        seconds = median_seconds([args.mmpool, "check", "--format", fmt, *launch], args.startup_runs, env)
        print(f"check --format {fmt:<6} {'':<32} {seconds * 1000:7.0f}ms  {seconds / floor:.2f}x floor")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
