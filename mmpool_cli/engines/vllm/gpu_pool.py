"""vLLM's GPU decode pool (``--mm-ipc-gpu-memory-gb``), as vLLM 0.30-0.34 size it.

Each API process builds a byte-counting semaphore of ``int(gb * 2**30) // api_process_count``
bytes (``multimodal/gpu_ipc_memory.py:127-152``) and refuses a share of 0 (``total_bytes must be
positive, got 0``); one acquire larger than the share fails (``:88-93``). Its one caller is the
PyNvVideoCodec decoder, which asks for sampled frames × height × width × 3 bytes
(``video_decoders/pynvvideocodec.py:601-612``). Every GPU worker takes the whole budget, and
with a GPU video backend each API process's decoder surfaces and CUDA context, out of its KV
cache (``gpu_ipc_memory.py:155-267``, ``v1/worker/gpu_worker.py:709-713, 837-841``).
Pure core: standard library only.
"""

from __future__ import annotations

from dataclasses import dataclass

MiB = 1 << 20
DECODER_BYTES = 128 * MiB  # PYNVVIDEOCODEC_DECODER_GPU_MEMORY_BYTES, per hardware decoder
DECODER_CACHE_SIZE = 4  # PYNVVIDEOCODEC_DECODER_CACHE_SIZE: surfaces per decoder with max_width/max_height
CUDA_CONTEXT_BYTES = 1_932_735_283  # PYNVVIDEOCODEC_CUDA_CONTEXT_BYTES = int(1.8 * 1024 * MiB_bytes)
DEFAULT_HW_DECODERS = 2  # PYNVVIDEOCODEC_DEFAULT_HW_DECODERS
FRAME_CHANNELS = 3  # the decoder's RGB frames


@dataclass(frozen=True)
class DecodeRequest:
    """One video's GPU decode: the frames the loader samples and their size."""

    item: str
    frames: int
    width: int
    height: int

    @property
    def bytes(self) -> int:
        """What the decoder acquires from the pool: frames × H × W × 3."""
        return self.frames * self.height * self.width * FRAME_CHANNELS


@dataclass(frozen=True)
class DecodeItem:
    """One request's decode against one API process's share."""

    item: str
    bytes: int
    fits: bool


@dataclass(frozen=True)
class GpuDecodePool:
    """The pool of every API process and what it takes from the KV cache. Field order is the JSON order."""

    total_bytes: int
    api_processes: int
    bytes_per_process: int
    decoder_bytes: int  # the GPU video backend's decoder surfaces and CUDA contexts over all API processes
    kv_reserved_bytes: int
    gpu_video_backend: bool
    items: tuple[DecodeItem, ...]

    @property
    def floors_to_zero(self) -> bool:
        """Whether each process's share is 0 bytes, which vLLM refuses at start-up."""
        return self.bytes_per_process <= 0


def decoder_bytes_per_process(
    hw_decoders: int = DEFAULT_HW_DECODERS, max_width: int | None = None, max_height: int | None = None
) -> int:
    """One API process's decoder surfaces and CUDA context under the PyNvVideoCodec backend.

    >>> decoder_bytes_per_process()
    2201170739
    """
    surface = DECODER_BYTES
    if max_width is not None and max_height is not None:
        surface = max(DECODER_BYTES, max_width * max_height * FRAME_CHANNELS * DECODER_CACHE_SIZE)
    return surface * hw_decoders + CUDA_CONTEXT_BYTES


def kv_reserved(
    total_bytes: int, api_processes: int, *, gpu_video_backend: bool = False, hw_decoders: int = DEFAULT_HW_DECODERS
) -> int:
    """What ``reserve_mm_ipc_gpu_memory`` takes from each GPU worker's KV cache: the whole budget,
    plus each API process's decoder footprint under a GPU video backend (even with a 0 budget).

    >>> kv_reserved(0, 4, gpu_video_backend=True) == 4 * decoder_bytes_per_process()
    True
    """
    decoders = max(1, api_processes) * decoder_bytes_per_process(hw_decoders) if gpu_video_backend else 0
    return max(0, total_bytes) + decoders


def plan(
    total_bytes: int,
    api_processes: int,
    requests: tuple[DecodeRequest, ...] = (),
    *,
    gpu_video_backend: bool = False,
    hw_decoders: int = DEFAULT_HW_DECODERS,
) -> GpuDecodePool | None:
    """The decode pool for ``total_bytes`` (``int(gb * 2**30)``) over ``api_processes`` API processes.

    None when the budget is 0 (vLLM builds no pool). With ``gpu_video_backend`` the KV reservation
    adds each API process's decoder footprint, as ``reserve_mm_ipc_gpu_memory`` does.

    >>> plan(107, 64).bytes_per_process, plan(107, 108).floors_to_zero
    (1, True)
    """
    if total_bytes <= 0:
        return None
    processes = max(1, api_processes)
    share = total_bytes // processes
    reserved = kv_reserved(total_bytes, processes, gpu_video_backend=gpu_video_backend, hw_decoders=hw_decoders)
    items = tuple(DecodeItem(r.item, r.bytes, r.bytes <= share) for r in requests)
    return GpuDecodePool(total_bytes, processes, share, reserved - total_bytes, reserved, gpu_video_backend, items)


def kv_tokens(reserved_bytes: int, bytes_per_token: int, block_size: int) -> tuple[int, int]:
    """The KV tokens ``reserved_bytes`` cost one worker: vLLM allocates whole blocks
    (``available // (block_size × bytes_per_token)``), so the loss is one of two block multiples.

    >>> kv_tokens(1 << 30, 57344, 16)
    (18720, 18736)
    """
    per_block = block_size * bytes_per_token
    low = reserved_bytes // per_block
    high = -(-reserved_bytes // per_block)
    return low * block_size, high * block_size
