"""What recording vLLM's multimodal caches costs the whole process: vLLM's own classes, plain or recorded.

A maintainer script, not part of mmpool and not run in CI (torch, vLLM's unpacked wheel and its
dependencies: docs/development.md). One run is one process that builds vLLM's ``lru`` processor-cache
sender through its ``factories.py`` (1 GiB) and an ``EncoderCacheManager``, then sends ``--requests``
requests of one to three items (a popular few of 64 small ones) through them as vLLM does: the sender's
``is_cached``, the processor's own ``_merge_mm_kwargs`` (touches, ``get_and_update_item``), then the
encoder cache's ``check_and_update_cache`` / ``can_allocate`` / ``allocate`` and the request's ``free``.
The loop is timed whole: ``perf_counter_ns`` and the process's CPU time (``process_time_ns``: every
thread's, the hook's writer included). The parent runs it ABAB, plain then under ``mmpool record --out
DIR --``, ``--pairs`` times, and prints the medians per event (a sender lookup or an encoder call).

Usage::

    python benchmarks/record_vllm_caches.py --vllm-src /tmp/mmpool-vllm-wheels/0.34.0/src \\
        --deps /tmp/vllm-deps [--requests 100000] [--pairs 5]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

CHILD = r"""
import importlib, json, logging, multiprocessing, random, sys, time
from types import SimpleNamespace as NS
sys.path.insert(0, SCRIPTS)
sys.meta_path.insert(0, importlib.import_module("vllm_dump")._StandInFinder())
logging.disable(logging.CRITICAL)
import torch
from vllm.multimodal.cache import factories
from vllm.multimodal.inputs import MultiModalBatchedField, MultiModalFieldElem, MultiModalKwargsItem
from vllm.multimodal.processing.processor import BaseMultiModalProcessor
from vllm.v1.core.encoder_cache_manager import EncoderCacheManager

mm = NS(mm_processor_cache_gb=1, mm_processor_cache_type="lru", mm_shm_cache_max_object_size_mb=128)
par = NS(_api_process_count=1, data_parallel_size=1, data_parallel_external_lb=False, world_size=1)
cfg = NS(model_config=NS(supports_multimodal_inputs=True, get_multimodal_config=lambda: mm), parallel_config=par)
cache = factories.processor_cache_from_config(cfg)
merge = BaseMultiModalProcessor._merge_mm_kwargs
proc_self = NS(_recompute_cached_prompt_update=lambda update, idx: update)
keys = [f"item{i:03d}" for i in range(64)]
items = {k: MultiModalKwargsItem({"p": MultiModalFieldElem(data=torch.zeros(4, 16), field=MultiModalBatchedField())})
         for k in keys}
rng = random.Random(3)
def popular():
    return keys[min(int(rng.paretovariate(1.1)) - 1, 63)]
requests = [[popular() for _ in range(rng.randrange(1, 4))] for _ in range(REQUESTS)]
manager = EncoderCacheManager(cache_size=4096)
events = 0
t0, c0 = time.perf_counter_ns(), time.process_time_ns()
for n, ks in enumerate(requests):
    cached = cache.is_cached(ks)
    missing = [items[k] for k, c in zip(ks, cached) if not c]
    merge(proc_self, cache, {"image": ks}, {"image": cached}, {"image": missing}, {"image": [[] for _ in missing]})
    feats = [NS(identifier=k) for k in ks]
    req = NS(request_id=f"r{n}", mm_features=feats, get_num_encoder_embeds=lambda i: 16)
    for i in range(len(ks)):
        if not manager.check_and_update_cache(req, i) and manager.can_allocate(req, i, 4096, 0):
            manager.allocate(req, i)
            events += 2
        events += 1
    manager.free(req)
    events += len(ks) + 1  # the sender's lookups and its is_cached
wall, cpu = time.perf_counter_ns() - t0, time.process_time_ns() - c0
print(json.dumps({"events": events, "wall_ns": wall, "cpu_ns": cpu}))
"""


def child(args: argparse.Namespace, record: Path | None) -> dict[str, int]:
    code = f"SCRIPTS = {str(ROOT / 'scripts')!r}\nREQUESTS = {args.requests}\n{CHILD}"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("VLLM_", "MMPOOL_RECORD"))}
    env |= {"PYTHONPATH": f"{args.vllm_src}{os.pathsep}{args.deps}", "CUDA_VISIBLE_DEVICES": ""}
    env["VLLM_TARGET_DEVICE"] = "cpu"
    head = [] if record is None else [sys.executable, "-m", "mmpool_cli", "record", "--out", str(record), "--"]
    done = subprocess.run(
        [*head, sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=ROOT, check=False
    )
    if done.returncode != 0 or done.stderr:
        raise SystemExit(f"the run failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.splitlines()[-1])  # type: ignore[no-any-return]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--vllm-src", type=Path, required=True, help="vLLM's unpacked wheel (the folder holding vllm/)")
    parser.add_argument("--deps", type=Path, required=True, help="the pip --target folder of its dependencies")
    parser.add_argument("--requests", type=int, default=100_000)
    parser.add_argument("--pairs", type=int, default=5)
    args = parser.parse_args()
    runs: dict[str, list[dict[str, int]]] = {"plain": [], "recorded": []}
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(args.pairs):
            runs["plain"].append(child(args, None))
            runs["recorded"].append(child(args, Path(tmp) / f"rec{i}"))
    per = {
        name: {what: statistics.median(r[f"{what}_ns"] / r["events"] for r in rs) for what in ("wall", "cpu")}
        for name, rs in runs.items()
    }
    for name, rs in runs.items():
        each = " ".join(f"{r['cpu_ns'] / r['events']:7.0f}" for r in rs)
        print(f"  {name:<9}{each}  ns CPU per event, run by run")
    events = runs["plain"][0]["events"]
    print(f"{args.pairs} pairs (ABAB), {args.requests:,} requests, {events:,} events a run; medians per event:")
    for what in ("wall", "cpu"):
        plain, recorded = per["plain"][what], per["recorded"][what]
        print(f"  {what:<4}  plain {plain:8.1f} ns   recorded {recorded:8.1f} ns   +{recorded - plain:7.1f} ns")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
