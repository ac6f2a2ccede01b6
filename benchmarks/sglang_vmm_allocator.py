"""SGLang 0.5.23's own cuda_vmm transport methods, loaded from the wheel, replaying mmpool's events.

Not part of mmpool and not used by its tests: SGLang is not a dependency. This downloads the
wheel with pip (once, into the cache directory of ``sglang_allocator``), loads
``sglang/srt/utils/cuda_vmm_utils.py`` and ``sglang/srt/utils/cuda_vmm_transport_utils.py`` with
stand-ins for the SGLang modules they import, and drives, unmodified and on the CPU (torch on the
CPU is enough):

* ``CudaVmmFeatureTransport.wrap_items``: which tensors of a request are packed, the packed
  attempt, and the one-chunk-per-tensor fallback;
* ``CudaVmmMemoryPool.wrap_tensors`` / ``wrap_tensor`` / ``_reserve_chunk``: the chunk sizes, best
  fit and the copies into a CPU ``memory_pool`` tensor;
* ``_acknowledge_consumption`` on the proxy (the packed owner for a packed chunk): the consumers'
  ack words written into that tensor;
* ``_recycle_chunks`` / ``_merge_chunks``: the recycler's tick, reading those ack words.

What cannot run without a GPU is replaced at the edge only: ``torch.cuda.device`` and
``torch.cuda.stream`` are empty contexts, pinned host memory is ordinary host memory, the publish
stream's ``synchronize`` does nothing, and ``__init__`` (which allocates and exports VMM memory)
is skipped: the fields it sets are set as it sets them, the allocation size being the share
rounded down to the granularity as ``_allocate`` computes it.
"""

from __future__ import annotations

import contextlib
import enum
import importlib.util
import sys
import threading
import types
import zipfile
from pathlib import Path

from sglang_allocator import CACHE, SGLANG_VERSION, load_memory_pool

TRANSPORT = "sglang/srt/utils/cuda_vmm_transport_utils.py"
UTILS = "sglang/srt/utils/cuda_vmm_utils.py"


class _Modality(enum.Enum):
    IMAGE = "image"
    VIDEO = "video"
    AUDIO = "audio"


class _Item:
    """A stand-in ``MultimodalDataItem``: the fields ``wrap_items`` reads."""

    def __init__(self, modality: _Modality, feature) -> None:
        self.modality = modality
        self.feature = feature
        self.precomputed_embeddings = None
        self.model_specific_data: dict = {}


def _extract(member: str) -> Path:
    path = CACHE / Path(member).name
    if not path.exists():
        load_memory_pool()  # downloads the wheel into CACHE
        wheel = next(CACHE.glob("sglang-*.whl"))
        with zipfile.ZipFile(wheel) as zf:
            path.write_bytes(zf.read(member))
    return path


def _load(name: str, path: Path):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def load_vmm_transport():
    """SGLang's ``cuda_vmm_transport_utils`` module, its SGLang imports stood in for."""
    import torch

    stubs = {
        "sglang": types.ModuleType("sglang"),
        "sglang.srt": types.ModuleType("sglang.srt"),
        "sglang.srt.utils": types.ModuleType("sglang.srt.utils"),
        "sglang.srt.managers": types.ModuleType("sglang.srt.managers"),
        "sglang.srt.managers.schedule_batch": types.ModuleType("sglang.srt.managers.schedule_batch"),
        "sglang.srt.multimodal": types.ModuleType("sglang.srt.multimodal"),
        "sglang.srt.multimodal.transport": types.ModuleType("sglang.srt.multimodal.transport"),
        "sglang.srt.multimodal.transport.memory_pool": types.ModuleType("memory_pool"),
        "sglang.srt.runtime_context": types.ModuleType("sglang.srt.runtime_context"),
        "sglang.srt.utils.cuda_ipc_transport_utils": types.ModuleType("cuda_ipc_transport_utils"),
    }
    stubs["sglang.srt.utils"].log_info_on_rank0 = lambda *a, **k: None
    batch = stubs["sglang.srt.managers.schedule_batch"]
    batch.Modality, batch.MultimodalDataItem, batch.MultimodalProcessorOutput = _Modality, _Item, object
    stubs["sglang.srt.multimodal.transport.memory_pool"].get_mm_feature_consumer_count = lambda: 1
    runtime = stubs["sglang.srt.runtime_context"]
    runtime.get_mm = runtime.get_parallel = runtime.get_serving = lambda: None
    ipc = stubs["sglang.srt.utils.cuda_ipc_transport_utils"]
    ipc.DEFER_CUDA_IPC_FEATURE_RECONSTRUCTION_KEY = "defer_cuda_ipc_feature_reconstruction"
    ipc.MM_FEATURE_CACHE_SIZE, ipc.MM_ITEM_MEMORY_POOL_RECYCLE_INTERVAL = 1 << 30, 0.05
    ipc.CudaIpcTensorTransportProxy = object
    ipc.get_mm_feature_pool_size_per_worker = lambda size, workers: size // workers
    saved = {name: sys.modules.get(name) for name in [*stubs, "sglang.srt.utils.cuda_vmm_utils"]}
    sys.modules.update(stubs)
    try:
        _load("sglang.srt.utils.cuda_vmm_utils", _extract(UTILS))
        module = _load("sglang_cuda_vmm_transport_utils", _extract(TRANSPORT))
    finally:
        for name, mod in saved.items():
            if mod is None:
                sys.modules.pop(name, None)
            else:
                sys.modules[name] = mod

    class _Cuda:  # the CUDA contexts the methods enter, as empty contexts on the CPU
        @staticmethod
        def device(*_):
            return contextlib.nullcontext()

        @staticmethod
        def stream(*_):
            return contextlib.nullcontext()

    class _Torch(types.ModuleType):
        def __getattr__(self, name):
            return getattr(torch, name)

    stand_in = _Torch("torch")
    stand_in.cuda = _Cuda
    stand_in.empty = lambda *a, pin_memory=False, **k: torch.empty(*a, **k)  # no pinned memory on the CPU
    module.torch = stand_in
    module._prepare_pinned_copy_source = lambda tensor: tensor.contiguous()
    return module


class _Stream:
    def synchronize(self) -> None:
        return None

    def wait_stream(self, _) -> None:
        return None


class SGLangVmmWorker:
    """One tokenizer worker's transport and pool, fields set as ``__init__`` sets them."""

    def __init__(self, module, per_worker: int, granularity: int, consumers: int) -> None:
        import torch

        cls = module.CudaVmmMemoryPool
        pool = cls.__new__(cls)
        pool.device_index = 0
        pool.consumer_count = consumers
        pool._recycle_interval = 0.05
        pool._lock = threading.Lock()
        pool._publisher_condition = threading.Condition(pool._lock)
        pool._active_publishers = 0
        pool._closing = pool._closed = pool._pool_full_warned = False
        pool._pool_error = None
        pool._fd_broker = None
        pool.use_fabric = True
        pool.shareable_handle = b"stand-in"
        pool.posix_socket_path = None
        pool.allocation_size = per_worker // granularity * granularity  # as _allocate computes it
        pool.memory_pool = torch.zeros(pool.allocation_size, dtype=torch.uint8)
        pool.available_chunks = [module._CudaVmmMemoryChunk(0, pool.allocation_size)]
        pool.occupied_chunks = []
        pool._publish_stream = pool._recycle_stream = _Stream()
        transport = module.CudaVmmFeatureTransport.__new__(module.CudaVmmFeatureTransport)
        transport.pool = pool
        self.module, self.pool, self.transport = module, pool, transport
        memory = types.SimpleNamespace(memory=pool.memory_pool)
        self._imported = lambda _device: memory

    def wrap_request(self, tensors: list[tuple[int, int, bool]]) -> list:
        """Wrap one request's tensors ``(nbytes, element size, image or video)``; a proxy or None each."""
        import torch

        dtypes = {1: torch.uint8, 2: torch.bfloat16, 4: torch.float32, 8: torch.float64}
        items = []
        for nbytes, elem, visual in tensors:
            feature = torch.zeros(nbytes // elem, dtype=dtypes[elem])
            items.append(_Item(_Modality.IMAGE if visual else _Modality.AUDIO, feature))
        self.transport.wrap_items(items)
        proxies = []
        for item in items:
            proxy = item.feature
            if isinstance(proxy, self.module.CudaVmmTensorTransportProxy):
                proxy._pool = self._imported
                owner = getattr(proxy, "_packed_owner", None)
                if owner is not None:
                    owner._pool = self._imported
                proxies.append(proxy)
            else:
                proxies.append(None)  # wrap_tensor returned tensor.cpu(): the CPU path
        return proxies

    def ack(self, proxy) -> None:
        """Every consumer reconstructs ``proxy``: for a packed tensor that acknowledges its whole chunk."""
        target = getattr(proxy, "_packed_owner", proxy)
        target._acknowledge_consumption(0, self.pool.consumer_count)

    def tick(self) -> None:
        self.pool._recycle_chunks()


def replay(module, events, groups, workers, per_worker, granularity, consumers, interval):
    """The data offset (None on a miss) of every alloc, every pool ticking at 0, I, 2I, ...

    ``events`` are mmpool's ``(t, op, key, nbytes, worker)``; ``groups`` maps an alloc's key to
    ``(request, element size, image or video)``: the allocs of one request at one ``t`` are
    wrapped together, at the first of them.
    """
    pools = [SGLangVmmWorker(module, per_worker, granularity, consumers) for _ in range(workers)]
    live = {}
    decided = {}
    offsets = []
    next_tick = 0
    i = 0
    while i < len(events):
        t, op, key, nbytes, worker = events[i]
        while next_tick < t:
            for p in pools:
                p.tick()
            next_tick += interval
        if op == 1:
            held = live.pop(key)
            if held is not None:
                pools[held[0]].ack(held[1])
            i += 1
            continue
        if key not in decided:
            request = groups[key][0]
            members = [e for e in events if e[0] == t and e[1] == 0 and e[4] == worker and groups[e[2]][0] == request]
            proxies = pools[worker].wrap_request([(e[3], groups[e[2]][1], groups[e[2]][2]) for e in members])
            for e, proxy in zip(members, proxies, strict=True):
                decided[e[2]] = proxy
        proxy = decided.pop(key)
        offsets.append(None if proxy is None else proxy.data_offset)
        live[key] = None if proxy is None else (worker, proxy)
        i += 1
    return offsets


__all__ = ["SGLANG_VERSION", "load_vmm_transport", "replay"]
