"""Read the GPUs through NVML (no CUDA context) and map ``CUDA_VISIBLE_DEVICES`` as CUDA does."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from mmpool_cli.errors import EXIT_UNAVAILABLE, MmpoolError
from mmpool_cli.probe.probe_report import GpuInfo

INSTALL_HINT = "pip install 'mmpool[probe]'"


class ProbeUnavailable(MmpoolError):
    """The probe cannot run on this machine (no NVML, no torch, no GPU); the message says how to fix it."""

    exit_code = EXIT_UNAVAILABLE


@dataclass(frozen=True)
class NvmlDevice:
    """The NVML facts the mapping needs."""

    index: int
    uuid: str
    name: str
    total: int
    free: int
    used: int


def visible_order(cuda_visible_devices: str | None, devices: Sequence[NvmlDevice]) -> list[int]:
    """NVML indices in CUDA's order for ``CUDA_VISIBLE_DEVICES``.

    Entries are indices or (prefixes of) ``GPU-`` UUIDs. As in CUDA, the list ends at the first
    entry that names no device or repeats one; unset means every device in NVML order.
    """
    if cuda_visible_devices is None:
        return [d.index for d in devices]
    order: list[int] = []
    for raw in cuda_visible_devices.split(","):
        entry = raw.strip()
        match = None
        if entry.isdigit() and entry.isascii():
            match = next((d.index for d in devices if d.index == int(entry)), None)
        elif entry.startswith("GPU-") and len(entry) > 4:
            hits = [d.index for d in devices if d.uuid.startswith(entry)]
            match = hits[0] if len(hits) == 1 else None
        if match is None or match in order:
            break
        order.append(match)
    return order


def read_nvml() -> list[NvmlDevice]:
    """Every GPU NVML sees, with its memory in bytes. Creates no CUDA context.

    Raises:
        ProbeUnavailable: nvidia-ml-py is missing or NVML cannot start (no driver, no GPU).
    """
    try:
        import pynvml
    except ImportError:
        raise ProbeUnavailable(f"nvidia-ml-py is not installed: {INSTALL_HINT}") from None
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as e:
        raise ProbeUnavailable(
            f"NVML cannot start ({e}): no NVIDIA driver or GPU is visible here; run the probe on the "
            "GPU machine that will run SGLang"
        ) from None
    try:
        found = []
        for index in range(pynvml.nvmlDeviceGetCount()):
            handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            memory = pynvml.nvmlDeviceGetMemoryInfo(handle)
            found.append(
                NvmlDevice(
                    index=index,
                    uuid=_text(pynvml.nvmlDeviceGetUUID(handle)),
                    name=_text(pynvml.nvmlDeviceGetName(handle)),
                    total=int(memory.total),
                    free=int(memory.free),
                    used=int(memory.used),
                )
            )
        return found
    except pynvml.NVMLError as e:
        raise ProbeUnavailable(f"NVML failed while reading the GPUs: {e}") from None
    finally:
        pynvml.nvmlShutdown()


def free_bytes(nvml_index: int) -> int:
    """Free memory of one GPU right now, through NVML."""
    import pynvml

    pynvml.nvmlInit()
    try:
        return int(pynvml.nvmlDeviceGetMemoryInfo(pynvml.nvmlDeviceGetHandleByIndex(nvml_index)).free)
    finally:
        pynvml.nvmlShutdown()


def gpu_infos(devices: Sequence[NvmlDevice], order: Sequence[int]) -> list[GpuInfo]:
    """Report rows for every NVML device, with its CUDA index where it is visible."""
    cuda_index = {nvml: i for i, nvml in enumerate(order)}
    return [
        GpuInfo(
            cuda_index=cuda_index.get(d.index),
            nvml_index=d.index,
            name=d.name,
            uuid=d.uuid,
            total_bytes=d.total,
            free_bytes=d.free,
            used_bytes=d.used,
        )
        for d in devices
    ]


def _text(value: str | bytes) -> str:
    return value.decode() if isinstance(value, bytes) else value
