"""SGLang 0.5.23's own feature pools across real processes on a GPU, with the harness's ground truth.

A maintainer script, not part of mmpool and not run in CI (it needs an NVIDIA GPU, torch and SGLang's
wheel, or a folder of its files: ``record_sglang_load.py`` says which files, checked against the
wheel's RECORD, and which imports at the edge are stood in for; the pool code itself runs unmodified).

``--workers`` producer processes play the tokenizer workers: each builds its own pool, exactly as a
worker does (``MmItemMemoryPool(per_worker, SGLANG_MM_ITEM_MEM_POOL_RECYCLE_INTERVAL_SEC, 0,
consumers)``, ``base_processor.py:482``; or ``CudaVmmMemoryPool(..., allow_posix_fallback=True)``,
``cuda_vmm_transport_utils.py:1018``; the budget split by ``get_mm_feature_pool_size_per_worker``),
with its real recycler thread, and publishes a seeded stream of real CUDA tensors (1 MiB to 48 MiB,
1 to 3 a request, Poisson arrivals) through the pool's own entry points: cuda_ipc
``MmItemMemoryPool.wrap_tensor`` (a ``None`` sends the tensor by value: ``tensor.cpu()``, as
``_wrap_tensor_for_cuda_ipc`` does, ``base_processor.py:1758``); cuda_vmm ``wrap_tensors`` for a
request of two or more, else or on ``None`` ``wrap_tensor`` per tensor (``wrap_items``,
``cuda_vmm_transport_utils.py:1110``). Each request's proxies are pickled to every one of
``--consumers`` consumer processes (the scheduler ranks, ``tp_rank`` = their index), which rebuild
each tensor over CUDA IPC with SGLang's own ``reconstruct_on_target_device`` (cuda_ipc: waits on the
ready word, copies, writes this rank's acknowledgement word, ``cuda_ipc.py:378-411``; cuda_vmm: copies
and sets this rank's acknowledgement word, ``cuda_vmm_transport_utils.py:849-907``, a packed request's
first child for all, ``977-999``) and check its first 64 KiB against the producer's sum.

Ground truth (``--truth DIR``): ``worker-N.jsonl``, one line per lease in call order (``offset``: the
lease's start as SGLang returned it, ``proxy_state['ipc_extra']['pool_byte_offset']``, or the VMM
proxy's ``data_offset``, its chunk's start plus the control words; ``null``: a miss), with the
producer's pid and ``t_ns`` (CLOCK_MONOTONIC, before the call); ``consumer-N.jsonl``: when each
lease was received and rebuilt (``t_acked_ns`` after the stream that wrote the acknowledgement
finished); ``run.json``: the settings and counts. Run it under ``mmpool record --out DIR -- python3
benchmarks/record_gpu.py ...`` to record the same run.

Usage::

    python3 benchmarks/record_gpu.py --sglang WHEEL_OR_DIR --transport cuda_ipc --budget-mib 64 \\
        --truth DIR [--workers 2] [--consumers 2] [--requests 150] [--rate 40] [--seed 1]
"""

from __future__ import annotations

import argparse
import json
import math
import multiprocessing as mp
import os
import random
import sys
import tempfile
import time
from pathlib import Path

MiB = 1 << 20
CHECK_BYTES = 65536
SLACK = 4 * MiB


def features(seed: int, worker: int, requests: int, rate: float) -> list[tuple[int, list[int]]]:
    """(arrival ns after the start, [bytes of each feature]) of every request of one worker."""
    rng = random.Random(seed * 1000 + worker)
    t, out = 0.0, []
    for _ in range(requests):
        t += rng.expovariate(rate)
        k = rng.choice([1, 1, 1, 2, 2, 3])
        sizes = [2 * int(math.exp(rng.uniform(math.log(MiB // 2), math.log(24 * MiB)))) for _ in range(k)]
        out.append((int(t * 1e9), sizes))
    return out


def _load(args, rank: int):
    from record_sglang_load import load

    return load(
        Path(args.sglang),
        Path(args.cache),
        tp_rank=rank,
        tp_size=args.consumers,
        workers=args.workers,
        transport=args.transport,
    )


def producer(args, worker: int, queues, ready, start, done_consumers) -> None:
    """One tokenizer worker: its own pool, its stream of features, every lease as SGLang returned it."""
    import torch

    ipc, vmm, _ = _load(args, 0)
    torch.cuda.set_device(0)
    per_worker = ipc.get_mm_feature_pool_size_per_worker(ipc.MM_FEATURE_CACHE_SIZE, args.workers)
    interval = ipc.MM_ITEM_MEMORY_POOL_RECYCLE_INTERVAL
    if args.transport == "cuda_ipc":
        pool = ipc.MmItemMemoryPool(per_worker, interval, 0, args.consumers)
    else:
        pool = vmm.CudaVmmMemoryPool(
            memory_size=per_worker,
            recycle_interval=interval,
            base_gpu_id=0,
            consumer_count=args.consumers,
            allow_posix_fallback=True,
        )
    stream = features(args.seed, worker, args.requests, args.rate)
    rng = random.Random(args.seed * 7919 + worker)
    source = torch.randint(0, 256, (24 * 2 * MiB + SLACK,), dtype=torch.uint8, device="cuda:0")
    planned = []  # (arrival, [(tensor, check sum)])
    for arrival, sizes in stream:
        items = []
        for nbytes in sizes:
            at = 2 * rng.randrange(SLACK // 2)
            tensor = source[at : at + nbytes].view(torch.bfloat16)
            items.append((tensor, int(source[at : at + CHECK_BYTES].to(torch.int64).sum())))
        planned.append((arrival, items))
    torch.cuda.synchronize()
    ready.release()
    while start.value == 0:
        time.sleep(0.001)
    t0 = start.value
    truth = []
    for r, (arrival, items) in enumerate(planned):
        delay = t0 + arrival - time.monotonic_ns()
        if delay > 0:
            time.sleep(delay / 1e9)
        sent = _publish(args.transport, pool, worker, r, items, truth)
        for q in queues:
            q.put((worker, r, sent))
    for q in queues:
        q.put(None)
    done_consumers.wait()
    deadline = time.monotonic() + 10
    while _leased(args.transport, pool) and time.monotonic() < deadline:  # let the recycler return every lease
        time.sleep(0.01)
    left = _leased(args.transport, pool)
    pool.shutdown()
    out = Path(args.truth) / f"worker-{worker}.jsonl"
    out.write_text("".join(json.dumps(e) + "\n" for e in truth))
    if left:
        print(f"worker {worker}: {left} leases never returned", file=sys.stderr)


def _leased(transport: str, pool) -> int:
    if transport == "cuda_ipc":
        return pool.active_lease_count
    with pool._lock:
        return len(pool.occupied_chunks)


def _publish(transport: str, pool, worker: int, r: int, items, truth: list) -> list:
    """Publish one request's tensors as SGLang's tokenizer worker does; what the consumers receive."""
    pid = os.getpid()
    sent = []
    if transport == "cuda_ipc":
        for j, (tensor, check) in enumerate(items):
            t = time.monotonic_ns()
            proxy = pool.wrap_tensor(tensor, use_pool_handle_cache=True)
            if proxy is None:
                tensor.cpu()  # by value, as _wrap_tensor_for_cuda_ipc does
            offset = None if proxy is None else proxy.proxy_state["ipc_extra"]["pool_byte_offset"]
            nbytes = tensor.numel() * tensor.element_size()
            truth.append(
                {"worker": worker, "pid": pid, "req": r, "items": [j], "bytes": nbytes, "t_ns": t, "offset": offset}
            )
            sent.append((j, proxy, check))
        return sent
    packed = None
    if len(items) >= 2:
        t = time.monotonic_ns()
        packed = pool.wrap_tensors([tensor for tensor, _ in items])
        nbytes = [tensor.numel() * tensor.element_size() for tensor, _ in items]
        owner = None if packed is None else packed[0]._packed_owner
        truth.append(
            {
                "worker": worker,
                "pid": pid,
                "req": r,
                "items": list(range(len(items))),
                "bytes": nbytes,
                "t_ns": t,
                "offset": None if owner is None else owner.data_offset,
                "control_offset": None if owner is None else owner.control_offset,
                "packed": True,
            }
        )
        if packed is not None:
            return [(j, proxy, check) for j, (proxy, (_, check)) in enumerate(zip(packed, items, strict=True))]
    for j, (tensor, check) in enumerate(items):
        t = time.monotonic_ns()
        wrapped = pool.wrap_tensor(tensor)  # a miss returns tensor.cpu()
        hit = isinstance(wrapped, vmm_proxy_class(pool))
        nbytes = tensor.numel() * tensor.element_size()
        truth.append(
            {
                "worker": worker,
                "pid": pid,
                "req": r,
                "items": [j],
                "bytes": nbytes,
                "t_ns": t,
                "offset": wrapped.data_offset if hit else None,
                "control_offset": wrapped.control_offset if hit else None,
            }
        )
        sent.append((j, wrapped if hit else None, check))
    return sent


def vmm_proxy_class(pool):
    return sys.modules[type(pool).__module__].CudaVmmTensorTransportProxy


def consumer(args, rank: int, q, ready, done) -> None:
    """One scheduler rank: rebuild every tensor with SGLang's consumer code, which acknowledges it."""
    import torch

    _load(args, rank)
    torch.cuda.set_device(0)
    torch.zeros(1, device="cuda:0")
    ready.release()
    log, finished, bad = [], 0, 0
    while finished < args.workers:
        message = q.get()
        if message is None:
            finished += 1
            continue
        worker, r, sent = message
        t_recv = time.monotonic_ns()
        rebuilt = []
        for j, proxy, check in sent:
            if proxy is None:
                continue
            tensor = proxy.reconstruct_on_target_device(0)
            rebuilt.append((j, tensor, check))
        t_call = time.monotonic_ns()
        torch.cuda.current_stream().synchronize()
        t_acked = time.monotonic_ns()
        for _j, tensor, check in rebuilt:
            bad += int(tensor.view(torch.uint8)[:CHECK_BYTES].to(torch.int64).sum()) != check
        log.append(
            {
                "worker": worker,
                "req": r,
                "items": [j for j, _, _ in rebuilt],
                "t_recv_ns": t_recv,
                "t_called_ns": t_call,
                "t_acked_ns": t_acked,
            }
        )
    (Path(args.truth) / f"consumer-{rank}.jsonl").write_text("".join(json.dumps(e) + "\n" for e in log))
    (Path(args.truth) / f"consumer-{rank}.bad").write_text(str(bad))
    done.release()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sglang", required=True, help="SGLang 0.5.23's wheel, or a folder of its files")
    parser.add_argument("--cache", help="where the checked files are copied (default: a temporary folder)")
    parser.add_argument("--transport", choices=["cuda_ipc", "cuda_vmm"], required=True)
    parser.add_argument("--budget-mib", type=int, required=True, help="SGLANG_MM_FEATURE_CACHE_MB (all workers)")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--consumers", type=int, default=2)
    parser.add_argument("--requests", type=int, default=150, help="per worker")
    parser.add_argument("--rate", type=float, default=40.0, help="requests per second per worker")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--truth", required=True, help="folder for the ground truth")
    args = parser.parse_args(argv)
    os.environ["SGLANG_MM_FEATURE_CACHE_MB"] = str(args.budget_mib)
    args.cache = args.cache or tempfile.mkdtemp(prefix="sglang-src-")
    Path(args.truth).mkdir(parents=True, exist_ok=True)
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from record_sglang_load import extract

    extract(Path(args.sglang), Path(args.cache))
    ctx = mp.get_context("spawn")
    ready, done = ctx.Semaphore(0), ctx.Semaphore(0)
    start = ctx.Value("q", 0)
    all_done = ctx.Event()
    queues = [ctx.Queue() for _ in range(args.consumers)]
    procs = [ctx.Process(target=consumer, args=(args, c, queues[c], ready, done)) for c in range(args.consumers)]
    procs += [ctx.Process(target=producer, args=(args, w, queues, ready, start, all_done)) for w in range(args.workers)]
    began = time.monotonic()
    for p in procs:
        p.start()
    for _ in procs:
        ready.acquire()
    start.value = time.monotonic_ns() + 50_000_000
    for _ in range(args.consumers):
        done.acquire()
    all_done.set()
    for p in procs:
        p.join()
    codes = [p.exitcode for p in procs]
    bad = sum(int((Path(args.truth) / f"consumer-{c}.bad").read_text()) for c in range(args.consumers))
    leases = [json.loads(line) for w in range(args.workers) for line in (Path(args.truth) / f"worker-{w}.jsonl").open()]
    summary = {
        "transport": args.transport,
        "budget_mib": args.budget_mib,
        "workers": args.workers,
        "consumers": args.consumers,
        "requests": args.requests,
        "rate": args.rate,
        "seed": args.seed,
        "start_ns": start.value,
        "leases": len(leases),
        "misses": sum(e["offset"] is None for e in leases),
        "checksum_mismatches": bad,
        "exit_codes": codes,
        "wall_s": round(time.monotonic() - began, 2),
    }
    (Path(args.truth) / "run.json").write_text(json.dumps(summary, indent=1) + "\n")
    print(json.dumps(summary))
    return 0 if not bad and not any(codes) else 1


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    raise SystemExit(main())
