"""Drive SGLang 0.5.23's own cuda_ipc pool code on the CPU, in a process of its own, for the recording tests.

``python pool_driver.py SGLANG_TREE TRUTH.json SEED ITEMS MEMORY_SIZE CONSUMERS INTERVAL_S [cuda_vmm]``

``SGLANG_TREE`` holds ``sglang/srt/multimodal/transport/memory_pool.py`` as the wheel ships it
(the test copies it from the wheel into a temporary directory, with empty package files and a
``runtime_context`` stand-in). The pool is built as ``__init__`` builds it, without its CUDA calls;
its control words are a CPU int32 tensor, written as the producer and the consumers write them on
the GPU; the real ``_recycle_loop`` runs in its own thread and reads them with its own code, torch
placing its ``cuda:N`` tensors on the CPU. The producer allocates as ``copy_tensor`` does (under the
lock), the consumers acknowledge after a random delay. ``TRUTH.json`` gets every allocation's real
offset (null for a miss), in order. With ``cuda_vmm``, the same for ``CudaVmmMemoryPool``
(``utils/cuda_vmm_transport_utils.py``, its imports stand-ins but for ``memory_pool``): chunks taken
with its own ``_reserve_for_publish`` and ``_finish_publish``, its ack words written in a CPU byte
tensor, its own ``_recycle_loop`` freeing them; the truth is each chunk's data offset.
"""

from __future__ import annotations

import contextlib
import heapq
import json
import random
import sys
import threading
import time

import torch


class _Torch:
    """The real torch, with ``cuda:N`` devices placed on the CPU (no GPU here)."""

    def __getattr__(self, name: str) -> object:
        return getattr(torch, name)

    @staticmethod
    def tensor(data: object, dtype: object = None, device: object = None) -> torch.Tensor:
        return torch.tensor(data, dtype=dtype)

    class cuda:  # noqa: N801 - torch's own name
        @staticmethod
        def set_device(_device: object) -> None:
            pass

        @staticmethod
        def device(_device: object) -> contextlib.nullcontext[None]:
            return contextlib.nullcontext()

        @staticmethod
        def stream(_stream: object) -> contextlib.nullcontext[None]:
            return contextlib.nullcontext()


def vmm_pool(memory_size: int, consumers: int, interval: float) -> tuple[object, object]:
    """SGLang's CudaVmmMemoryPool as ``__init__`` leaves it, without the CUDA allocation; its module."""
    from sglang.srt.utils import cuda_vmm_transport_utils as vmm

    vmm.torch = _Torch()
    cls = vmm.CudaVmmMemoryPool
    pool = cls.__new__(cls)
    pool.device_index, pool.consumer_count, pool._recycle_interval = 0, consumers, interval
    pool._lock = threading.Lock()
    pool._publisher_condition = threading.Condition(pool._lock)
    pool._active_publishers, pool._closing, pool._closed = 0, False, False
    pool._pool_full_warned, pool._pool_error, pool._fd_broker = False, None, None
    pool._stop_recycler = threading.Event()
    pool.allocation_size = memory_size
    pool.memory_pool = torch.zeros(memory_size, dtype=torch.uint8)
    pool.available_chunks = [vmm._CudaVmmMemoryChunk(0, memory_size)]
    pool.occupied_chunks = []
    pool._recycle_stream = None
    return pool, vmm


def run_vmm(tree: str, truth: str, seed: int, items: int, memory_size: int, consumers: int, interval: float) -> None:
    sys.path.insert(0, tree)
    pool, vmm = vmm_pool(memory_size, consumers, interval)
    recycler = threading.Thread(target=pool._recycle_loop, daemon=True)
    recycler.start()
    rng = random.Random(seed)
    control = pool.control_size
    due: list[tuple[float, int]] = []
    offsets: list[int | None] = []
    sizes = [1 << 20, 3 << 20, 6 << 20, 150_000, 12 << 20]
    for _ in range(items):
        nbytes = rng.choice(sizes)
        required = vmm.align_up(control + nbytes, vmm._CONTROL_ALIGNMENT)
        chunk = pool._reserve_for_publish(required)  # as wrap_tensor publishes
        if chunk is None:
            offsets.append(None)
        else:
            pool.memory_pool[chunk.start : chunk.start + control].zero_()
            with pool._lock:
                pool.occupied_chunks.append(chunk)
            pool._finish_publish()
            offsets.append(chunk.start + control)
            heapq.heappush(due, (time.monotonic() + rng.uniform(0.0, 4 * interval), chunk.start))
        while due and due[0][0] <= time.monotonic():  # every consumer's ack word
            _, start = heapq.heappop(due)
            pool.memory_pool[start : start + 4 * consumers].view(torch.int32).fill_(1)
        time.sleep(rng.uniform(0.0, interval / 2))
    for _, start in due:
        pool.memory_pool[start : start + 4 * consumers].view(torch.int32).fill_(1)
    deadline = time.monotonic() + 5.0
    while time.monotonic() < deadline:
        with pool._lock:
            if not pool.occupied_chunks:
                break
        time.sleep(interval)
    pool._stop_recycler.set()
    recycler.join()
    with open(truth, "w", encoding="utf-8") as f:
        json.dump(offsets, f)
    print(f"allocated {items}, missed {offsets.count(None)}")


def main(tree: str, truth: str, seed: int, items: int, memory_size: int, consumers: int, interval: float) -> None:
    sys.path.insert(0, tree)
    from sglang.srt.multimodal.transport import memory_pool as mp

    mp.torch = _Torch()
    cls = mp.StreamOrderedMmFeaturePool
    pool = cls.__new__(cls)
    slots = mp.DEFAULT_MAX_INFLIGHT_SLICES
    pool.memory_size, pool.consumer_count, pool.device_id = memory_size, consumers, 0
    pool.control_words_per_slot, pool.max_inflight_slices, pool.transport_name = 1 + consumers, slots, "CUDA IPC"
    pool.data_start = mp.align_up(slots * (1 + consumers) * mp.CONTROL_WORD_BYTES, mp.DATA_ALIGNMENT)
    pool._control_words = torch.zeros((slots, 1 + consumers), dtype=torch.int32)
    pool._available_ranges = [(pool.data_start, memory_size)]
    pool._available_slots = list(reversed(range(slots)))
    pool._slot_generations = [0] * slots
    pool._occupied = {}
    pool._lock = threading.Lock()
    pool._recycle_interval = interval
    pool._recycler_stop_event = threading.Event()
    recycler = threading.Thread(target=pool._recycle_loop, daemon=True)
    recycler.start()

    rng = random.Random(seed)
    due: list[tuple[float, int, int]] = []
    due_lock = threading.Condition()
    done = threading.Event()

    def consume() -> None:  # every consumer's ack word, once the request's time has passed
        while True:
            with due_lock:
                while not due and not done.is_set():
                    due_lock.wait(0.01)
                if not due and done.is_set():
                    return
                at, slot, generation = due[0]
                wait = at - time.monotonic()
                if wait > 0:
                    due_lock.wait(wait)
                    continue
                heapq.heappop(due)
            pool._control_words[slot, 1:] = generation

    consumer = threading.Thread(target=consume, daemon=True)
    consumer.start()
    offsets: list[int | None] = []
    sizes = [1 << 20, 3 << 20, 6 << 20, 150_000, 12 << 20]
    for _ in range(items):
        nbytes = rng.choice(sizes)
        with pool._lock:  # as copy_tensor allocates
            lease = pool._allocate_locked(nbytes)
        offsets.append(None if lease is None else lease.start)
        if lease is not None:
            pool._control_words[lease.slot, 0] = lease.generation  # the producer's ready word
            with due_lock:
                heapq.heappush(due, (time.monotonic() + rng.uniform(0.0, 4 * interval), lease.slot, lease.generation))
                due_lock.notify()
        time.sleep(rng.uniform(0.0, interval / 2))
    done.set()
    consumer.join()
    deadline = time.monotonic() + 5.0
    while time.monotonic() < deadline:
        with pool._lock:
            if not pool._occupied:
                break
        time.sleep(interval)
    pool._recycler_stop_event.set()
    recycler.join()
    with open(truth, "w", encoding="utf-8") as f:
        json.dump(offsets, f)
    print(f"allocated {items}, missed {offsets.count(None)}")


if __name__ == "__main__":
    a = sys.argv[1:]
    run = run_vmm if a[7:] == ["cuda_vmm"] else main
    run(a[0], a[1], int(a[2]), int(a[3]), int(a[4]), int(a[5]), float(a[6]))
