"""The probe's child processes: each owns one CUDA context and answers the parent's requests.

Runs only in children started by ``mmpool_cli.probe.runner``; torch is imported inside
``serve`` (the fork server preloads it, so a child starts in milliseconds). Every request gets
one reply: a dict of figures, or ``{"error": ..., "kind": ...}``.
"""

from __future__ import annotations

import os
import pickle
import sys
import time
import traceback
from typing import Any

BLOCK_BYTES = 256 << 10  # the pool is checked block by block; this size reads fastest on an H200
PATTERN_MULTIPLIER = 0x9E3779B97F4A7C15  # golden-ratio odd constant: neighbouring words differ
WORD_MASK = (1 << 63) - 1
# The fork server imports this module right after torch: when it did, its children can tell the parent.
LOADED_AT = time.time()


def serve(conn: Any, device: int, alloc_conf: str | None, log_path: str) -> None:
    """Child main loop: set the allocator mode, import torch, answer requests until ``exit``.

    Replies hold only plain Python values: the parent never imports torch to read them.
    """
    entered_at = time.time()  # with LOADED_AT: how long the fork itself took
    _quiet(log_path)
    if alloc_conf:
        os.environ["PYTORCH_CUDA_ALLOC_CONF"] = alloc_conf
    else:
        os.environ.pop("PYTORCH_CUDA_ALLOC_CONF", None)
    try:
        import torch
    except BaseException as e:  # noqa: BLE001 - reported to the parent, never raised
        conn.send({"error": f"cannot import torch: {e}", "kind": "import"})
        return
    state: dict[str, Any] = {"torch": torch, "device": device}
    # str(): torch.__version__ is a TorchVersion, and unpickling one would import torch in the parent
    conn.send({"pid": os.getpid(), "torch": str(torch.__version__), "loaded_at": LOADED_AT, "entered_at": entered_at})
    while True:
        try:
            request = conn.recv()
        except (EOFError, OSError):
            return
        op = request.pop("op")
        if op == "exit":
            conn.send({})
            return
        try:
            reply = HANDLERS[op](state, **request)  # type: ignore[operator]
        except BaseException as e:  # noqa: BLE001 - every failure becomes a reply
            kind = "oom" if isinstance(e, torch.cuda.OutOfMemoryError) else "error"
            traceback.print_exc()
            reply = {"error": f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}", "kind": kind}
        conn.send(reply)


def _quiet(log_path: str) -> None:
    # stdout belongs to the parent's report; the child's own chatter goes to its log file
    log = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)
    os.dup2(log, 2)
    os.close(devnull)
    os.close(log)
    sys.stdout = open(os.devnull, "w")  # noqa: SIM115 - lives as long as the child


def _sync(state: dict[str, Any]) -> None:
    state["torch"].cuda.synchronize(state["device"])


def init(state: dict[str, Any]) -> dict[str, Any]:
    """Create this process's CUDA context on the device and say what it sees."""
    torch, device = state["torch"], state["device"]
    start = time.perf_counter()
    torch.cuda.set_device(device)
    free, total = torch.cuda.mem_get_info(device)
    props = torch.cuda.get_device_properties(device)
    return {
        "seconds": time.perf_counter() - start,
        "free": int(free),
        "total": int(total),
        "uuid": "GPU-" + str(props.uuid),
        "name": props.name,
        "capability": f"{props.major}.{props.minor}",
        "cuda": torch.version.cuda,
    }


def alloc(state: dict[str, Any], nbytes: int) -> dict[str, Any]:
    """Allocate one pool as SGLang does: ``torch.empty(nbytes, uint8)`` on the device."""
    torch, device = state["torch"], state["device"]
    before = torch.cuda.memory_reserved(device)
    start = time.perf_counter()
    state["pool"] = torch.empty(nbytes, dtype=torch.uint8, device=f"cuda:{device}")
    _sync(state)
    seconds = time.perf_counter() - start
    return {"seconds": seconds, "reserved": int(torch.cuda.memory_reserved(device) - before)}


def _pattern_parts(state: dict[str, Any]) -> tuple[Any, Any, Any]:
    torch = state["torch"]
    pool = state["pool"]
    whole = pool.numel() // BLOCK_BYTES * BLOCK_BYTES
    blocks = pool[:whole].view(-1, BLOCK_BYTES).view(torch.int64)
    return torch, blocks, pool[whole:]


def _reference_block(torch: Any, device: int, seed: int) -> Any:  # one block of int64 words
    words = torch.arange(BLOCK_BYTES // 8, dtype=torch.int64, device=f"cuda:{device}")
    return words * (PATTERN_MULTIPLIER & WORD_MASK) + seed


def fill_verify(state: dict[str, Any]) -> dict[str, Any]:
    """Write a pattern unique to this process into the whole pool, then read every byte back.

    Each block holds the reference block plus its own index in the first word, so a block
    written to the wrong place, or never written, changes that block's 64-bit sum; the tail
    (under one block) is compared byte for byte. Verification is one read pass of the pool.
    """
    torch, blocks, tail = _pattern_parts(state)
    device = state["device"]
    reference = _reference_block(torch, device, seed=os.getpid())
    count = blocks.shape[0]
    index = torch.arange(count, dtype=torch.int64, device=f"cuda:{device}")
    tail_ref = reference.view(torch.uint8)[: tail.numel()]
    if count:
        blocks.copy_(reference.expand(count, -1))
        blocks[:, 0] += index
    tail.copy_(tail_ref)
    state["expected"] = reference.sum() + index
    bad = int((blocks.sum(dim=1) != state["expected"]).sum()) if count else 0
    bad += 1 if tail.numel() and not torch.equal(tail, tail_ref) else 0
    return {"ok": bad == 0, "bad_blocks": bad}


def verify_bandwidth(state: dict[str, Any]) -> dict[str, Any]:
    """Time the verification's read pass over the pool (fastest of five, after a warm-up)."""
    torch, blocks, _tail = _pattern_parts(state)
    timings = []
    for _ in range(6):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        sums = blocks.sum(dim=1)
        end.record()
        _sync(state)
        timings.append(start.elapsed_time(end) / 1000)
    if not torch.equal(sums, state["expected"]):
        raise RuntimeError("the pool changed between verification passes")
    seconds = min(timings[1:])
    return {"seconds": seconds, "gbps": blocks.numel() * 8 / seconds / 1e9}


def copy_bandwidth(state: dict[str, Any], nbytes: int) -> dict[str, Any]:
    """Device-to-device copy bandwidth (bytes read plus written per second), median of ten."""
    torch, device = state["torch"], state["device"]
    src = torch.empty(nbytes, dtype=torch.uint8, device=f"cuda:{device}")
    dst = torch.empty_like(src)
    dst.copy_(src)
    times = []
    for _ in range(10):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        dst.copy_(src)
        end.record()
        _sync(state)
        times.append(start.elapsed_time(end) / 1000)
    del src, dst
    torch.cuda.empty_cache()
    times.sort()
    median = times[len(times) // 2]
    return {"bytes": nbytes, "seconds": median, "gbps": 2 * nbytes / median / 1e9}


def share(state: dict[str, Any]) -> dict[str, Any]:
    """Export the pool for another process, as SGLang does: the storage's CUDA IPC handle."""
    from torch.multiprocessing.reductions import reduce_tensor

    start = time.perf_counter()
    rebuild, args = reduce_tensor(state["pool"])  # type: ignore[no-untyped-call]
    payload = pickle.dumps((rebuild, args))
    return {"payload": payload, "seconds": time.perf_counter() - start}


def open_shared(state: dict[str, Any], payload: bytes) -> dict[str, Any]:
    """Open a producer's pool from its exported handle (consumer side)."""
    torch = state["torch"]
    torch.cuda.set_device(state["device"])
    start = time.perf_counter()
    rebuild, args = pickle.loads(payload)  # noqa: S301 - the payload comes from our own producer child
    state["pool"] = rebuild(*args)
    _sync(state)
    return {"seconds": time.perf_counter() - start, "bytes": int(state["pool"].numel())}


def _slice_pattern(torch: Any, device: int, nbytes: int, seed: int) -> Any:
    words = torch.arange(nbytes, dtype=torch.int64, device=f"cuda:{device}")
    return ((words * 2654435761 + seed) & 0xFF).to(torch.uint8)


def write_slice(state: dict[str, Any], offset: int, nbytes: int, seed: int) -> dict[str, Any]:
    """Producer: write a seeded slice into the pool and clear the acknowledgement word."""
    torch = state["torch"]
    pool = state["pool"]
    pool[offset : offset + nbytes].copy_(_slice_pattern(torch, state["device"], nbytes, seed))
    pool[:4].view(torch.int32).fill_(0)
    _sync(state)
    return {}


def read_slice(state: dict[str, Any], offset: int, nbytes: int, seed: int) -> dict[str, Any]:
    """Consumer: copy the slice out of the shared pool, compare it, then write the acknowledgement."""
    torch = state["torch"]
    pool = state["pool"]
    start = time.perf_counter()
    copy = pool[offset : offset + nbytes].clone()
    _sync(state)
    seconds = time.perf_counter() - start
    ok = torch.equal(copy, _slice_pattern(torch, state["device"], nbytes, seed))
    if ok:
        pool[:4].view(torch.int32).fill_(seed & 0x7FFFFFFF)
        _sync(state)
    return {"ok": bool(ok), "seconds": seconds, "gbps": nbytes / seconds / 1e9 if seconds else None}


def wait_ack(state: dict[str, Any], value: int, wait_seconds: float) -> dict[str, Any]:
    """Producer: wait until the consumer's acknowledgement shows in the pool."""
    torch = state["torch"]
    word = state["pool"][:4].view(torch.int32)
    start = time.perf_counter()
    while time.perf_counter() - start < wait_seconds:
        if int(word.item()) == value & 0x7FFFFFFF:
            return {"seen": True, "seconds": time.perf_counter() - start}
        time.sleep(0.001)
    return {"seen": False, "seconds": time.perf_counter() - start}


def release(state: dict[str, Any]) -> dict[str, Any]:
    """Drop the pool and return the cached blocks to the driver."""
    torch, device = state["torch"], state["device"]
    state.pop("pool", None)
    _sync(state)
    torch.cuda.empty_cache()
    return {"reserved": int(torch.cuda.memory_reserved(device))}


def vmm(state: dict[str, Any], nbytes: int) -> dict[str, Any]:
    """CUDA VMM on the device: granularity and which handle types ``cuMemCreate`` accepts."""
    try:
        from cuda.bindings import driver as cu
    except ImportError:
        return {"available": False}
    device = state["device"]
    (err,) = cu.cuInit(0)
    results: dict[str, Any] = {"available": True, "handle_types": {}}
    kinds = {
        "FABRIC": cu.CUmemAllocationHandleType.CU_MEM_HANDLE_TYPE_FABRIC,
        "POSIX_FD": cu.CUmemAllocationHandleType.CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR,
        "NONE": cu.CUmemAllocationHandleType.CU_MEM_HANDLE_TYPE_NONE,
    }
    for name, handle_type in kinds.items():
        prop = cu.CUmemAllocationProp()
        prop.type = cu.CUmemAllocationType.CU_MEM_ALLOCATION_TYPE_PINNED
        prop.location.type = cu.CUmemLocationType.CU_MEM_LOCATION_TYPE_DEVICE
        prop.location.id = device
        prop.requestedHandleTypes = handle_type
        entry: dict[str, Any] = {}
        for flag_name, flag in (
            ("minimum", cu.CUmemAllocationGranularity_flags.CU_MEM_ALLOC_GRANULARITY_MINIMUM),
            ("recommended", cu.CUmemAllocationGranularity_flags.CU_MEM_ALLOC_GRANULARITY_RECOMMENDED),
        ):
            err, granularity = cu.cuMemGetAllocationGranularity(prop, flag)
            entry[flag_name] = int(granularity) if err == cu.CUresult.CUDA_SUCCESS else None
        size = entry["recommended"] or 0
        if size:
            size = max(size, nbytes // size * size)
            err, handle = cu.cuMemCreate(size, prop, 0)
            entry["create"] = err == cu.CUresult.CUDA_SUCCESS
            entry["create_error"] = None if entry["create"] else cu.cuGetErrorName(err)[1].decode()
            entry["create_bytes"] = size
            if entry["create"]:
                cu.cuMemRelease(handle)
        results["handle_types"][name] = entry
    return results


HANDLERS = {
    "init": init,
    "alloc": alloc,
    "fill_verify": fill_verify,
    "verify_bandwidth": verify_bandwidth,
    "copy_bandwidth": copy_bandwidth,
    "share": share,
    "open_shared": open_shared,
    "write_slice": write_slice,
    "read_slice": read_slice,
    "wait_ack": wait_ack,
    "release": release,
    "vmm": vmm,
}
