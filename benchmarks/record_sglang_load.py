"""SGLang 0.5.23's two feature-pool transports, loaded unmodified from its wheel under their own names.

A maintainer helper for ``record_gpu.py`` and ``record_publish.py`` (not part of mmpool; SGLang is not
a dependency). ``load`` copies these files out of the wheel (or a folder holding them), checks each
against the sha256 the wheel's ``RECORD`` gives, and imports them as the ``sglang.srt...`` modules they
are, through Python's ordinary import system (so an import hook such as ``mmpool record``'s sees them):

* ``srt/multimodal/transport/{__init__,memory_pool,cuda_ipc}.py`` (cuda_ipc: ``MmItemMemoryPool``,
  ``StreamOrderedMmFeaturePool`` and its recycler thread, the consumer's ``CudaIpcTensorTransportProxy``)
* ``srt/utils/{cuda_vmm_transport_utils,cuda_vmm_utils,cuda_ipc_transport_utils}.py`` (cuda_vmm:
  ``CudaVmmMemoryPool``, its POSIX-fd broker and recycler, the consumer's proxies)
* ``srt/environ.py`` (``SGLANG_MM_FEATURE_CACHE_MB``, ``SGLANG_MM_ITEM_MEM_POOL_RECYCLE_INTERVAL_SEC``)

Stand-ins, only for imports at the edge that pull in the rest of the server:

* the packages ``sglang``, ``sglang.srt``, ``sglang.srt.utils``, ``sglang.srt.managers``: empty
  packages over the copied folder (their ``__init__`` imports the whole server); ``sglang.srt.utils``
  carries ``log_info_on_rank0`` (logs), used only by graph-capture code;
* ``sglang.srt.runtime_context``: ``get_parallel()`` (tp_size = consumers, tp_rank = this consumer's
  rank, one node, no attention DP), ``get_mm()``, ``get_serving()`` (tokenizer_worker_num);
* ``sglang.srt.managers.schedule_batch``: the three names ``cuda_vmm_transport_utils`` imports for
  ``CudaVmmFeatureTransport``, which the harness does not use (it calls the pool as
  ``wrap_items`` does, ``cuda_vmm_transport_utils.py:1110-1152``).
"""

from __future__ import annotations

import base64
import enum
import hashlib
import importlib
import logging
import os
import sys
import tempfile
import types
import zipfile
from pathlib import Path

SGLANG_VERSION = "0.5.23"
RECORD = f"sglang-{SGLANG_VERSION}.dist-info/RECORD"
FILES = (
    "sglang/srt/environ.py",
    "sglang/srt/multimodal/__init__.py",
    "sglang/srt/multimodal/transport/__init__.py",
    "sglang/srt/multimodal/transport/memory_pool.py",
    "sglang/srt/multimodal/transport/cuda_ipc.py",
    "sglang/srt/utils/cuda_ipc_transport_utils.py",
    "sglang/srt/utils/cuda_vmm_utils.py",
    "sglang/srt/utils/cuda_vmm_transport_utils.py",
)
_PACKAGES = ("sglang", "sglang.srt", "sglang.srt.utils", "sglang.srt.managers")


def _read(source: Path, name: str) -> bytes:
    if source.is_file():
        with zipfile.ZipFile(source) as wheel:
            return wheel.read(name)
    return (source / name).read_bytes()


def extract(source: Path, dest: Path) -> Path:
    """Copy ``FILES`` from a wheel or folder to ``dest``, each checked against the wheel's RECORD."""
    record = {}
    for line in _read(source, RECORD).decode().splitlines():
        path, digest, _size = line.rsplit(",", 2)
        record[path] = digest
    for name in FILES:
        data = _read(source, name)
        digest = "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        if record.get(name) != digest:
            raise SystemExit(f"{name}: not SGLang {SGLANG_VERSION}'s file (sha256 differs from its RECORD)")
        target = dest / name
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
    (dest / RECORD).parent.mkdir(parents=True, exist_ok=True)
    (dest / RECORD).write_bytes(_read(source, RECORD))
    return dest


class _Modality(enum.Enum):
    IMAGE = enum.auto()
    VIDEO = enum.auto()
    AUDIO = enum.auto()


def install_stand_ins(root: Path, *, tp_rank: int, tp_size: int, workers: int, transport: str) -> None:
    """The edge stand-ins above, over the folder ``extract`` wrote."""
    for name in _PACKAGES:
        module = types.ModuleType(name)
        module.__path__ = [str(root / name.replace(".", "/"))]
        sys.modules[name] = module
    sys.modules["sglang.srt.utils"].log_info_on_rank0 = lambda logger, msg: logger.info(msg)  # type: ignore[attr-defined]
    parallel = types.SimpleNamespace(
        tp_size=tp_size,
        tp_rank=tp_rank,
        attn_dp_enabled=False,
        num_dp_ranks=1,
        nnodes=1,
        attn_cp_rank=0,
        attn_tp_size=tp_size,
    )
    runtime = types.ModuleType("sglang.srt.runtime_context")
    runtime.get_parallel = lambda: parallel  # type: ignore[attr-defined]
    runtime.get_mm = lambda: types.SimpleNamespace(mm_feature_transport=transport)  # type: ignore[attr-defined]
    runtime.get_serving = lambda: types.SimpleNamespace(tokenizer_worker_num=workers)  # type: ignore[attr-defined]
    sys.modules[runtime.__name__] = runtime
    batch = types.ModuleType("sglang.srt.managers.schedule_batch")
    batch.Modality = _Modality  # type: ignore[attr-defined]
    batch.MultimodalDataItem = type("MultimodalDataItem", (), {})  # type: ignore[attr-defined]
    batch.MultimodalProcessorOutput = type("MultimodalProcessorOutput", (), {})  # type: ignore[attr-defined]
    sys.modules[batch.__name__] = batch


def load(source: Path, dest: Path, *, tp_rank: int, tp_size: int, workers: int, transport: str):
    """(cuda_ipc module, cuda_vmm_transport_utils module, memory_pool module) of SGLang 0.5.23."""
    if not (dest / RECORD).exists():
        extract(source, dest)
    install_stand_ins(dest, tp_rank=tp_rank, tp_size=tp_size, workers=workers, transport=transport)
    logging.basicConfig(level=os.environ.get("RECORD_GPU_LOG", "WARNING"))
    ipc = importlib.import_module("sglang.srt.multimodal.transport.cuda_ipc")
    vmm = importlib.import_module("sglang.srt.utils.cuda_vmm_transport_utils")
    pool = importlib.import_module("sglang.srt.multimodal.transport.memory_pool")
    return ipc, vmm, pool


def load_one_process(source: Path):
    """``load`` as one process of a one-GPU server sees it (rank 0 of 1, one tokenizer worker, cuda_ipc),
    SGLang's files extracted into a new temporary folder: the set-up of the single-process benchmarks."""
    dest = Path(tempfile.mkdtemp(prefix="sglang-src-"))
    return load(source, dest, tp_rank=0, tp_size=1, workers=1, transport="cuda_ipc")
