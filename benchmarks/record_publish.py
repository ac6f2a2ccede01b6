"""SGLang 0.5.23's publish path on a GPU with and without the recording hook, paired; and its decisions.

A maintainer script, not part of mmpool and not run in CI (NVIDIA GPU, torch, SGLang's wheel or a
folder of its files: ``record_sglang_load.py``). Run it under ``mmpool record --out DIR -- python3
benchmarks/record_publish.py ...``: the hook wraps the pools' methods when their modules are imported;
this script finds each wrapper (an attribute whose ``__wrapped__`` is SGLang's function) and switches
between SGLang's own function (A) and the wrapper (B) block by block, A B A B ..., so both run in one
process, one pool, one GPU state. Without the hook (``--reference``) B is a reference wrapper that
appends a tuple to a bounded deque.

Per size and transport five paired runs: the hook as it runs (its writer thread draining every
20 ms); the hook with that thread held off the timed blocks (it drains between them: the cost in
the allocating thread alone); an A/A control with no wrapper at all (the method's own noise); and
the reference deque wrapper on the event methods alone (allocate and release) over SGLang's own,
taking ``*args, **kwargs`` as the hook's wrappers do, and the same with the methods' own signature.

Timed, host time (``perf_counter_ns``), the GPU idle before each call:

* cuda_ipc: ``StreamOrderedMmFeaturePool.copy_tensor`` + the release SGLang's recycler does
  (``_release_locked``, ``_merge_ranges_locked`` under the lock, ``memory_pool.py:319-322``);
* cuda_vmm: ``CudaVmmMemoryPool.wrap_tensor`` (its copy ends in a stream synchronize) +
  ``cancel_proxy``.

Then the decisions: a seeded sequence of publishes, acknowledgements (``cancel_lease`` / ``cancel_proxy``)
and recycler ticks (``_recycle_ready_leases_locked``, the recycler itself idled by a long interval) run
once with A and once with B on fresh pools: the offsets must be identical.

Usage::

    python3 benchmarks/record_publish.py --sglang WHEEL_OR_DIR [--reps 200] [--blocks 16] [--out FILE]
"""

from __future__ import annotations

import argparse
import collections
import functools
import json
import random
import statistics
import sys
import time
from pathlib import Path

MiB = 1 << 20
EVENTS = ("_allocate_locked", "_release_locked", "_reserve_chunk", "_release_reserved_chunk")
SIZES = (1 * MiB, 4 * MiB, 16 * MiB, 48 * MiB)


def find_wrappers(classes) -> list[tuple[type, str, object, object]]:
    """(class, name, wrapper, SGLang's function) for each method the hook replaced."""
    found = []
    for cls in classes:
        for name, value in list(vars(cls).items()):
            inner = getattr(value, "__wrapped__", None)
            if inner is not None and callable(value):
                found.append((cls, name, value, inner))
    return found


def reference_wrappers(classes, names, fixed: bool = False) -> list[tuple[type, str, object, object]]:
    """A wrapper that appends (name, time, result) to a bounded deque: the floor any hook pays.

    ``fixed``: with the method's own two parameters ``(self, x)`` instead of ``*args, **kwargs``
    (the event methods take one argument; a hook that knows the code by its digest knows that).
    """
    events: collections.deque = collections.deque(maxlen=65536)
    now = time.monotonic_ns
    found = []
    for cls in classes:
        for name in names:
            inner = vars(cls).get(name)
            if inner is None:
                continue

            def wrapper(*args, _inner=inner, _name=name, **kwargs):
                result = _inner(*args, **kwargs)
                events.append((_name, now(), result))
                return result

            def fixed_wrapper(self, x, _inner=inner, _name=name):
                result = _inner(self, x)
                events.append((_name, now(), result))
                return result

            found.append((cls, name, functools.wraps(inner)(fixed_wrapper if fixed else wrapper), inner))
    return found


def use(wrappers, hooked: bool) -> None:
    for cls, name, wrapper, inner in wrappers:
        setattr(cls, name, wrapper if hooked else inner)


class Quiet:
    """Holds the hook's writer thread off the timed blocks: it drains between them, in this thread."""

    def __init__(self, writer) -> None:
        self.writer = writer

    def enter(self) -> None:
        self.writer.lock.acquire()

    def leave(self) -> None:
        self.writer.lock.release()
        self.writer.drain()


def time_block(op, reps: int, sync, quiet: Quiet | None = None) -> list[int]:
    times = []
    if quiet is not None:
        quiet.enter()
    try:
        for _ in range(reps):
            sync()
            t = time.perf_counter_ns()
            op()
            times.append(time.perf_counter_ns() - t)
    finally:
        if quiet is not None:
            quiet.leave()
    return times


def paired(op, wrappers, reps: int, blocks: int, sync, quiet: Quiet | None = None) -> dict:
    """Medians of A and B over ABAB blocks, and the per-pair difference of block medians.

    With no ``wrappers`` it is an A/A control: the difference is the noise of the method itself.
    """
    for hooked in (False, True):  # warm-up
        use(wrappers, hooked)
        time_block(op, reps, sync, quiet)
    a_all, b_all, diffs = [], [], []
    for _ in range(blocks):
        use(wrappers, False)
        a = time_block(op, reps, sync, quiet)
        use(wrappers, True)
        b = time_block(op, reps, sync, quiet)
        a_all += a
        b_all += b
        diffs.append(statistics.median(b) - statistics.median(a))
    use(wrappers, True)
    a_med, b_med = statistics.median(a_all), statistics.median(b_all)
    a_blocks = [statistics.median(a_all[i * reps : (i + 1) * reps]) for i in range(blocks)]
    q = statistics.quantiles(diffs, n=4)
    return {
        "a_median_us": round(a_med / 1e3, 3),
        "b_median_us": round(b_med / 1e3, 3),
        "added_median_us": round(statistics.median(diffs) / 1e3, 3),
        "added_iqr_us": [round(q[0] / 1e3, 3), round(q[2] / 1e3, 3)],
        "added_pct": round(100 * statistics.median(diffs) / a_med, 2),
        "a_block_spread_us": round((max(a_blocks) - min(a_blocks)) / 1e3, 3),
        "samples": len(a_all) + len(b_all),
    }


def decisions(ipc, vmm, torch, wrappers, seed: int) -> dict:
    """The offsets of one seeded sequence, with SGLang's functions and with the wrappers."""
    source = torch.randint(0, 256, (48 * MiB,), dtype=torch.uint8, device="cuda:0")
    results = {}
    for transport in ("cuda_ipc", "cuda_vmm"):
        runs = []
        for hooked in (False, True):
            use(wrappers, hooked)
            rng = random.Random(seed)
            if transport == "cuda_ipc":
                pool = ipc.MmItemMemoryPool(96 * MiB, 1e6, 0, 1)._pool
            else:
                pool = vmm.CudaVmmMemoryPool(
                    memory_size=96 * MiB,
                    recycle_interval=1e6,
                    base_gpu_id=0,
                    consumer_count=1,
                    allow_posix_fallback=True,
                )
            live, offsets = [], []
            for _ in range(600):
                x = rng.random()
                if live and x < 0.35:
                    held = live.pop(rng.randrange(len(live)))
                    if transport == "cuda_ipc":
                        pool.cancel_lease(
                            ready_byte_offset=held.ready_byte_offset,
                            ack_byte_offset=held.ack_byte_offset,
                            generation=held.generation,
                        )
                    else:
                        pool.cancel_proxy(held)
                elif transport == "cuda_ipc" and x < 0.45:
                    with pool._lock:
                        pool._recycle_ready_leases_locked()
                else:
                    nbytes = 2 * rng.randint(1, 12 * MiB)
                    tensor = source[:nbytes].view(torch.bfloat16)
                    if transport == "cuda_ipc":
                        lease, _ = pool.copy_tensor(tensor)
                        offsets.append(None if lease is None else lease.start)
                    else:
                        lease = pool.wrap_tensor(tensor)
                        lease = lease if isinstance(lease, vmm.CudaVmmTensorTransportProxy) else None
                        offsets.append(None if lease is None else lease.control_offset)
                    if lease is not None:
                        live.append(lease)
            torch.cuda.synchronize()
            pool.shutdown()
            runs.append(offsets)
        results[transport] = {
            "allocs": len(runs[0]),
            "misses": runs[0].count(None),
            "identical": runs[0] == runs[1],
        }
    use(wrappers, True)
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sglang", required=True)
    parser.add_argument("--reps", type=int, default=200, help="calls per block")
    parser.add_argument("--blocks", type=int, default=16, help="A/B block pairs per size")
    parser.add_argument("--reference", action="store_true", help="B = a deque-append wrapper (no hook needed)")
    parser.add_argument("--seed", type=int, default=5)
    parser.add_argument("--out", help="JSON results file")
    args = parser.parse_args(argv)
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import torch
    from record_sglang_load import load_one_process

    ipc, vmm, memory_pool = load_one_process(Path(args.sglang))
    torch.cuda.set_device(0)
    classes = (memory_pool.StreamOrderedMmFeaturePool, ipc.MmItemMemoryPool, vmm.CudaVmmMemoryPool)
    wrappers = find_wrappers(classes)
    mode = "hook"
    if args.reference or not wrappers:
        use(wrappers, False)
        names = (
            "_allocate_locked",
            "_release_locked",
            "_recycle_ready_leases_locked",
            "wrap_tensor",
            "_reserve_chunk",
            "_release_reserved_chunk",
            "_recycle_chunks",
        )
        wrappers, mode = reference_wrappers(classes, names), "reference deque wrapper"
    report = {
        "mode": mode,
        "wrapped": sorted(f"{cls.__name__}.{name}" for cls, name, _, _ in wrappers),
        "gpu": torch.cuda.get_device_name(0),
        "torch": torch.__version__,
        "reps": args.reps,
        "blocks": args.blocks,
        "cuda_ipc": {},
        "cuda_vmm": {},
    }
    sync = torch.cuda.synchronize
    quiet, reference, fixed = None, [], []
    if mode == "hook":
        from mmpool_record.recorder import RECORDER

        quiet = Quiet(RECORDER) if RECORDER.thread is not None else None
        use(wrappers, False)  # the reference wraps SGLang's own functions, the hook's put back after
        reference = reference_wrappers(classes, EVENTS)
        fixed = reference_wrappers(classes, EVENTS, fixed=True)
        use(reference, False)
        use(wrappers, True)
    pool = ipc.MmItemMemoryPool(256 * MiB, 0.05, 0, 1)._pool
    vpool = vmm.CudaVmmMemoryPool(
        memory_size=256 * MiB,
        recycle_interval=0.05,
        base_gpu_id=0,
        consumer_count=1,
        allow_posix_fallback=True,
    )
    for nbytes in SIZES:
        tensor = torch.randint(0, 256, (nbytes,), dtype=torch.uint8, device="cuda:0").view(torch.bfloat16)

        def publish_ipc(tensor=tensor):
            lease, _ = pool.copy_tensor(tensor)
            with pool._lock:
                pool._release_locked(lease)
                pool._merge_ranges_locked()

        def publish_vmm(tensor=tensor):
            vpool.cancel_proxy(vpool.wrap_tensor(tensor))

        for transport, op in (("cuda_ipc", publish_ipc), ("cuda_vmm", publish_vmm)):
            runs = {
                "hook": paired(op, wrappers, args.reps, args.blocks, sync),
                "control_a_a": paired(op, [], args.reps, args.blocks, sync),
            }
            if quiet is not None:
                runs["hook_writer_held"] = paired(op, wrappers, args.reps, args.blocks, sync, quiet)
                use(wrappers, False)
                runs["reference"] = paired(op, reference, args.reps, args.blocks, sync)
                use(reference, False)
                runs["reference_fixed"] = paired(op, fixed, args.reps, args.blocks, sync)
                use(fixed, False)
                use(wrappers, True)
            report[transport][str(nbytes // MiB)] = runs
            for name, figures in runs.items():
                print(f"{nbytes // MiB} MiB {transport} {name}: {figures}", flush=True)
    pool.shutdown()
    vpool.shutdown()
    report["decisions"] = decisions(ipc, vmm, torch, wrappers, args.seed)
    print(json.dumps(report["decisions"]))
    if args.out:
        Path(args.out).write_text(json.dumps(report, indent=1) + "\n")
    return 0 if all(d["identical"] for d in report["decisions"].values()) else 1


if __name__ == "__main__":
    raise SystemExit(main())
