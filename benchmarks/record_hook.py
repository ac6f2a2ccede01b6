"""The recording hook's cost per event in the allocating thread: SGLang's own methods, wrapped and not.

A maintainer script, not part of mmpool's tests (it needs torch, CPU is enough, and SGLang 0.5.23's
wheel or a folder of its files: ``record_sglang_load.py``). It builds SGLang's pools on the CPU without
their GPU parts (``__new__`` and the allocator's own fields, as ``sglang_allocator.SGLangPool`` does),
then times one publish and its release in a loop, SGLang's functions alone (A) against the same with
mmpool record's wrappers (B, ``mmpool_record.pools.wrap_ipc`` / ``wrap_vmm``, the code the hook puts
around them), in alternating blocks A B A B ...:

* cuda_ipc: ``_allocate_locked`` + ``_release_locked`` (+ the unwrapped ``_merge_ranges_locked``);
* cuda_vmm: ``_reserve_chunk`` + ``_release_reserved_chunk`` (its ``_merge_chunks`` wrapped too).

Two events a loop; the added time per event is half the difference of the block medians. The same
is measured first for two reference wrappers that only append ``(name, time, result)`` to a bounded
deque, on the two event methods: one taking ``*args, **kwargs`` as the hook's do
(``record_publish.reference_wrappers``), one with the method's own two parameters (the code is known
by its digest, so its signature is): where the cost goes. The queue is emptied between blocks (the
hook's writer thread drains it off this thread), so no event is dropped.

Usage::

    python benchmarks/record_hook.py --sglang WHEEL_OR_DIR [--loops 20000] [--blocks 15] [--out FILE]
"""

from __future__ import annotations

import argparse
import gc
import json
import platform
import statistics
import sys
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "mmpool_cli" / "_record"))

MiB = 1 << 20


def ipc_pool(memory_pool):
    pool = new_ipc_pool(memory_pool)

    def loop(n: int) -> None:
        for _ in range(n):
            lease = pool._allocate_locked(1 * MiB)
            pool._release_locked(lease)
            pool._merge_ranges_locked()

    return loop


def new_ipc_pool(memory_pool):
    """SGLang's StreamOrderedMmFeaturePool as ``__init__`` leaves it, without its GPU parts."""
    cls = memory_pool.StreamOrderedMmFeaturePool
    pool = cls.__new__(cls)
    slots = memory_pool.DEFAULT_MAX_INFLIGHT_SLICES
    pool.memory_size, pool.consumer_count, pool.control_words_per_slot = 256 * MiB, 1, 2
    pool.max_inflight_slices, pool.transport_name = slots, "CUDA IPC"
    pool.data_start = memory_pool.align_up(slots * 2 * 4, memory_pool.DATA_ALIGNMENT)
    pool._available_ranges = [(pool.data_start, pool.memory_size)]
    pool._available_slots = list(reversed(range(slots)))
    pool._slot_generations = [0] * slots
    pool._occupied = {}
    pool._recycle_interval, pool.device_id = 0.05, 0  # read by the hook when it registers the pool
    pool._lock = threading.Lock()
    return pool


def vmm_pool(vmm):
    cls = vmm.CudaVmmMemoryPool
    pool = cls.__new__(cls)
    pool.available_chunks = [vmm._CudaVmmMemoryChunk(0, 256 * MiB)]
    pool.occupied_chunks = []
    pool.allocation_size, pool.consumer_count, pool._recycle_interval, pool.device_index = 256 * MiB, 1, 0.05, 0

    def loop(n: int) -> None:
        for _ in range(n):
            chunk = pool._reserve_chunk(1 * MiB + 256)
            pool._release_reserved_chunk(chunk)

    return loop


def switch(pairs, hooked: bool) -> None:
    for cls, name, wrapper, original in pairs:
        setattr(cls, name, wrapper if hooked else original)


def measure(loop, pairs, loops: int, blocks: int, rec) -> dict:
    def block(hooked: bool) -> float:
        switch(pairs, hooked)
        del rec.buf[:]  # the writer thread's drain, off this thread
        t = time.perf_counter_ns()
        loop(loops)
        return (time.perf_counter_ns() - t) / loops

    block(False), block(True)  # warm-up
    gc.disable()
    try:
        a, b = [], []
        for _ in range(blocks):
            a.append(block(False))
            b.append(block(True))
    finally:
        gc.enable()
        switch(pairs, True)
    per_event = [(y - x) / 2 for x, y in zip(a, b, strict=True)]
    q = statistics.quantiles(per_event, n=4)
    return {
        "loop_unwrapped_ns": round(statistics.median(a), 1),
        "loop_wrapped_ns": round(statistics.median(b), 1),
        "added_per_event_ns": round(statistics.median(per_event), 1),
        "added_per_event_iqr_ns": [round(q[0], 1), round(q[2], 1)],
        "added_per_event_range_ns": [round(min(per_event), 1), round(max(per_event), 1)],
        "dropped": rec.dropped,
        "hook_errors": rec.errors,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sglang", required=True, help="SGLang 0.5.23's wheel, or a folder of its files")
    parser.add_argument("--loops", type=int, default=20000, help="publish+release pairs per block")
    parser.add_argument("--blocks", type=int, default=15, help="A/B block pairs")
    parser.add_argument("--out", help="JSON results file")
    args = parser.parse_args(argv)
    from mmpool_record import pools
    from mmpool_record.recorder import RECORDER
    from record_publish import reference_wrappers
    from record_sglang_load import load_one_process

    ipc, vmm, memory_pool = load_one_process(Path(args.sglang))
    RECORDER.limit = 1 << 40  # open, without a stream: the buffer is emptied between blocks
    report = {"python": sys.version.split()[0], "machine": platform.machine(), "processor": platform.processor()}
    for name, cls, wrap, make, module in (
        ("cuda_ipc", memory_pool.StreamOrderedMmFeaturePool, pools.wrap_ipc, ipc_pool, memory_pool),
        ("cuda_vmm", vmm.CudaVmmMemoryPool, pools.wrap_vmm, vmm_pool, vmm),
    ):
        events = ("_allocate_locked", "_release_locked", "_reserve_chunk", "_release_reserved_chunk")
        floors = {}
        for kind, reference in (
            ("args", reference_wrappers([cls], events)),
            ("fixed", reference_wrappers([cls], events, fixed=True)),
        ):
            floors[kind] = measure(make(module), reference, args.loops, args.blocks, RECORDER)
            switch(reference, False)
        before = dict(vars(cls))
        wrap(cls)
        pairs = [
            (cls, key, value, before[key])
            for key, value in vars(cls).items()
            if getattr(value, pools.MARK, False) and key in before
        ]
        report[name] = measure(make(module), pairs, args.loops, args.blocks, RECORDER)
        report[name]["wrapped"] = sorted(key for _, key, _, _ in pairs)
        for kind, floor in floors.items():
            report[name][f"reference_{kind}_added_per_event_ns"] = floor["added_per_event_ns"]
            report[name][f"reference_{kind}_added_per_event_iqr_ns"] = floor["added_per_event_iqr_ns"]
        print(name, json.dumps(report[name]), flush=True)
    if args.out:
        Path(args.out).write_text(json.dumps(report, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
