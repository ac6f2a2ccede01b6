"""SGLang 0.5.23's own cuda_ipc allocator methods, loaded from the wheel, replaying mmpool's events.

Not part of mmpool and not used by its tests: SGLang is not a dependency. This downloads the
wheel with pip (once, into a cache directory), loads only
``sglang/srt/multimodal/transport/memory_pool.py`` with two stand-ins (an empty ``torch`` module
and ``sglang.srt.runtime_context``), and drives the real ``_allocate_locked``,
``_release_locked`` and ``_merge_ranges_locked`` of ``StreamOrderedMmFeaturePool``.

``__init__`` allocates and zeroes CUDA control words, so ``SGLangPool`` sets the allocator
fields it sets instead (``_available_ranges``, ``_available_slots``, ``_slot_generations``,
``_occupied``, ``control_words_per_slot``, ``transport_name``). The recycler's tick,
``_recycle_ready_leases_locked``, reads the ready and ack words on the GPU; two ways to run it:

* ``real_recycle=True`` (needs torch, CPU is enough): the control words are a CPU int32 tensor,
  written as the producer and the consumers write them on the GPU (the ready word at the lease,
  every ack word at the last acknowledgement), and the method itself runs unmodified, its
  ``torch.tensor(..., device="cuda:N")`` calls placed on the CPU by the stand-in;
* otherwise ``tick`` runs the same steps in Python (nothing leased: return; release every
  completed lease in ``_occupied`` order; merge), comparing generations in a dict. The speed
  benchmark uses this one, which costs SGLang less than its GPU read would.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
import types
import zipfile
from pathlib import Path

SGLANG_VERSION = "0.5.23"
MODULE = "sglang/srt/multimodal/transport/memory_pool.py"
CACHE = Path.home() / ".cache" / "mmpool-bench" / f"sglang-{SGLANG_VERSION}"


def load_memory_pool(source: Path | None = None):
    """SGLang's ``memory_pool`` module, from the wheel, with stand-ins for torch and the runtime.

    ``source`` is an already extracted ``memory_pool.py`` (for a machine without network).
    """
    source = source or CACHE / "memory_pool.py"
    if not source.exists():
        CACHE.mkdir(parents=True, exist_ok=True)
        wheels = list(CACHE.glob("sglang-*.whl"))
        if not wheels:
            subprocess.run(
                [sys.executable, "-m", "pip", "download", "-q", "--no-deps", f"sglang=={SGLANG_VERSION}", "-d", CACHE],
                check=True,
            )
            wheels = list(CACHE.glob("sglang-*.whl"))
        with zipfile.ZipFile(wheels[0]) as wheel:
            source.write_bytes(wheel.read(MODULE))
    saved = {name: sys.modules.get(name) for name in ("torch", "sglang.srt.runtime_context")}
    torch = types.ModuleType("torch")
    torch.Tensor = object  # only used in annotations and in methods replaced below
    runtime = types.ModuleType("sglang.srt.runtime_context")
    runtime.get_parallel = lambda: None
    sys.modules["torch"] = torch
    sys.modules["sglang.srt.runtime_context"] = runtime
    try:
        spec = importlib.util.spec_from_file_location("sglang_memory_pool", source)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    finally:
        for name, mod in saved.items():
            if mod is None:
                sys.modules.pop(name, None)
            else:
                sys.modules[name] = mod
    return module


class SGLangPool:
    """One worker's pool: SGLang's allocator fields set as ``__init__`` sets them."""

    def __init__(
        self, module, memory_size: int, data_start: int, consumers: int = 1, real_recycle: bool = False
    ) -> None:
        cls = module.StreamOrderedMmFeaturePool
        pool = cls.__new__(cls)
        max_slices = module.DEFAULT_MAX_INFLIGHT_SLICES
        pool.memory_size = memory_size
        pool.consumer_count = consumers
        pool.control_words_per_slot = 1 + consumers
        pool.max_inflight_slices = max_slices
        pool.transport_name = "CUDA IPC"
        pool.data_start = module.align_up(max_slices * pool.control_words_per_slot * 4, module.DATA_ALIGNMENT)
        assert pool.data_start == data_start, (pool.data_start, data_start)
        pool._available_ranges = [(pool.data_start, memory_size)]
        pool._available_slots = list(reversed(range(max_slices)))
        pool._slot_generations = [0] * max_slices
        pool._occupied = {}
        self.pool = pool
        self.acked: dict[int, int] = {}  # slot -> the generation its consumers acknowledged
        self.real_recycle = real_recycle
        if real_recycle:
            import torch

            stub = module.torch
            stub.tensor = lambda data, dtype=None, device=None: torch.tensor(data, dtype=dtype)
            stub.long, stub.int32 = torch.long, torch.int32
            pool.device_id = 0
            pool._control_words = torch.zeros((max_slices, 1 + consumers), dtype=torch.int32)

    def alloc(self, nbytes: int):
        lease = self.pool._allocate_locked(nbytes)
        if lease is not None and self.real_recycle:
            self.pool._control_words[lease.slot, 0] = lease.generation  # the producer's ready word
        return lease

    def ack(self, lease) -> None:
        if self.real_recycle:
            self.pool._control_words[lease.slot, 1:] = lease.generation  # every consumer's ack word
        else:
            self.acked[lease.slot] = lease.generation

    def tick(self) -> None:
        pool = self.pool
        if self.real_recycle:
            pool._recycle_ready_leases_locked()
            return
        if not pool._occupied:
            return
        leases = list(pool._occupied.values())
        completed = [self.acked.get(lease.slot) == lease.generation for lease in leases]
        for lease, is_complete in zip(leases, completed, strict=True):
            if is_complete:
                pool._release_locked(lease)
        pool._merge_ranges_locked()


def replay(
    module,
    events,
    workers: int,
    memory_size: int,
    data_start: int,
    interval: int,
    consumers: int = 1,
    real_recycle: bool = False,
):
    """The offset (None on a miss) of every alloc in ``events``, every pool ticking at 0, I, 2I, ..."""
    pools = [SGLangPool(module, memory_size, data_start, consumers, real_recycle) for _ in range(workers)]
    live = {}
    offsets = []
    next_tick = 0
    for t, op, key, nbytes, worker in events:
        while next_tick < t:  # a tick at T runs after every event stamped at or before T
            for p in pools:
                p.tick()
            next_tick += interval
        if op == 0:
            lease = pools[worker].alloc(nbytes)
            offsets.append(None if lease is None else lease.start)
            live[key] = None if lease is None else (worker, lease)
        else:
            held = live.pop(key)
            if held is not None:
                pools[held[0]].ack(held[1])
    return offsets
