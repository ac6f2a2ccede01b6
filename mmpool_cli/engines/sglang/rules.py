"""SGLang's rules for the multimodal feature-transport pools that the generated tables do not hold.

The per-release facts (defaults, the cuda_ipc header, alignment and slot cap) are the chosen
release's record (``versions.Release``); what is here was read from the releases that have it
(``versions.TEXTS_FROM`` for the messages).
Each function states the SGLang behaviour it mirrors. Standard library only.
"""

from __future__ import annotations

from collections.abc import Mapping

from mmpool_cli.core.units import MiB, align_up

ENV_BUDGET = "SGLANG_MM_FEATURE_CACHE_MB"
ENV_RECYCLE = "SGLANG_MM_ITEM_MEM_POOL_RECYCLE_INTERVAL_SEC"
ENV_VLM_CACHE = "SGLANG_VLM_CACHE_SIZE_MB"

VMM_CONTROL_ALIGNMENT = 256
DEFAULT_VMM_GRANULARITY = 2 * MiB

POOL_TRANSPORTS = ("cuda_ipc", "cuda_vmm")

# PyTorch's caching allocator (the cuda_ipc pool is one torch.empty): requests are rounded up
# to 512 bytes; up to 1 MiB they come from a 2 MiB segment, below 10 MiB from a 20 MiB one,
# larger ones are rounded up to 2 MiB. With expandable segments, large blocks grow in 20 MiB pages.
_ALLOC_ROUND = 512
_SMALL_REQUEST = 1 * MiB
_SMALL_SEGMENT = 2 * MiB
_MIN_LARGE_ALLOC = 10 * MiB
_LARGE_SEGMENT = 20 * MiB
_LARGE_ROUND = 2 * MiB


def env_name(name: str, environ: Mapping[str, str]) -> tuple[str, str] | None:
    """The variable SGLang will read for ``name`` and its raw value, or None when unset.

    SGLang copies every ``SGL_X`` onto ``SGLANG_X`` at import, overwriting an ``SGLANG_X`` that
    is already set, so the ``SGL_`` twin wins.
    """
    legacy = "SGL_" + name.removeprefix("SGLANG_")
    if legacy in environ:
        return legacy, environ[legacy]
    if name in environ:
        return name, environ[name]
    return None


def parse_env_int(raw: str) -> int | None:
    """SGLang's ``EnvInt`` parse: Python's ``int(raw)``; None where that raises ValueError.

    On None SGLang only warns and uses the variable's default.
    """
    try:
        return int(raw)
    except ValueError:
        return None


def parse_env_float(raw: str) -> float | None:
    """SGLang's ``EnvFloat`` parse: Python's ``float(raw)``; None where that raises ValueError."""
    try:
        return float(raw)
    except ValueError:
        return None


def budget_mb(budget_bytes: int) -> int:
    """The integer MiB SGLang can be given for a budget: the floor of ``budget_bytes / 2**20``.

    >>> budget_mb(10**9)  # 1GB is 953.67 MiB
    953
    """
    return budget_bytes // MiB


def smallest_budget_mb(workers: int, minimum_per_worker: int) -> int:
    """The smallest ``SGLANG_MM_FEATURE_CACHE_MB`` whose split gives each worker ``minimum_per_worker`` bytes."""
    return max(1, -(-(minimum_per_worker * workers) // MiB))


def resolve_attention_dp(dp_size: int, attn_dp_size: int, enable_dp_attention: bool) -> tuple[int, int]:
    """``(dp_size, attn_dp_size)`` after SGLang rewrites the deprecated ``--enable-dp-attention``.

    That flag means ``--attn-dp-size <dp-size>`` with ``--dp-size 1`` when no attention-DP size
    is given (``handle_deprecated_dp_attention``).
    """
    if enable_dp_attention and attn_dp_size == 1:
        return 1, dp_size
    return dp_size, attn_dp_size


def consumer_count(tp_size: int, dp_size: int, attn_dp_size: int) -> int:
    """Scheduler ranks that read one pooled feature (``get_mm_feature_consumer_count``).

    ``tp_size // (dp_size * attn_dp_size)`` with attention DP, else ``tp_size``; the same count
    sizes the cuda_ipc control header and the cuda_vmm per-lease control words. Takes the sizes
    after ``resolve_attention_dp``.
    """
    if attn_dp_size > 1:
        return tp_size // (dp_size * attn_dp_size)
    return tp_size


def vmm_allocation_bytes(per_worker: int, granularity: int) -> int:
    """A cuda_vmm pool's allocation: the per-worker share rounded down to the VMM granularity."""
    return per_worker // granularity * granularity


def caching_allocator_reserved(nbytes: int, expandable_segments: bool = False) -> int:
    """Bytes PyTorch's caching allocator reserves on the GPU for one ``torch.empty(nbytes)``.

    Measured on an H200 (torch 2.11); a process that cached blocks earlier may reuse them.
    """
    if nbytes <= 0:
        return 0
    rounded = align_up(nbytes, _ALLOC_ROUND)
    if rounded <= _SMALL_REQUEST:
        return _SMALL_SEGMENT
    if expandable_segments:
        return align_up(rounded, _LARGE_SEGMENT)
    if rounded < _MIN_LARGE_ALLOC:
        return _LARGE_SEGMENT
    return align_up(rounded, _LARGE_ROUND)


def expandable_segments_enabled(alloc_conf: str | None) -> bool:
    """Whether a ``PYTORCH_CUDA_ALLOC_CONF`` value turns expandable segments on."""
    if not alloc_conf:
        return False
    for item in alloc_conf.split(","):
        key, _, value = item.partition(":")
        if key.strip() == "expandable_segments":
            return value.strip() == "True"
    return False


# The exact text SGLang raises or logs, for messages that quote it.
MSG_TOTAL_NOT_POSITIVE = "total_pool_size must be positive"
MSG_WORKERS_NOT_POSITIVE = "Tokenizer worker num must >= 1"
MSG_RECYCLE_NOT_POSITIVE = "recycle_interval must be positive"


def msg_replicas_with_attention_dp(dp_size: int, attn_dp_size: int) -> str:
    """SGLang's refusal of DP replicas combined with attention DP."""
    return (
        f"--dp-size {dp_size} with --attn-dp-size {attn_dp_size}: data-parallel replicas combined "
        "with attention data parallelism are not supported."
    )


def msg_too_small(per_worker: int, header: int) -> str:
    """SGLang's cuda_ipc error for a pool no larger than its control header."""
    return f"CUDA IPC pool is too small after control metadata: pool={per_worker}, control={header}"


def msg_below_granularity(per_worker: int, granularity: int) -> str:
    """SGLang's cuda_vmm error for a share smaller than the VMM granularity."""
    return f"memory_size={per_worker} is smaller than CUDA VMM granularity={granularity}"


# Transport resolution (``arg_groups/serving_hook.py``) and its errors.
ENV_LEGACY_TRANSPORT = "SGLANG_USE_CUDA_IPC_TRANSPORT"
ENV_ALLOC_CONF = "PYTORCH_CUDA_ALLOC_CONF"
DEFAULT_RECYCLE_SEC = 0.05
# ``threading.Event.wait`` refuses longer timeouts (OverflowError), which kills the recycler thread.
MAX_WAIT_SEC = 9223372036.0
MSG_IPC_SINGLE_NODE = "--mm-feature-transport=cuda_ipc only supports a single node."
MSG_VMM_NO_PP = "--mm-feature-transport=cuda_vmm does not support pipeline parallelism."

# The Qwen3-VL model override (``arg_groups/model_overrides/qwen3_vl.py``): on SM 9.0 with CUDA
# >= 12.3 and at least 60 GiB per GPU it picks cuda_ipc and may raise the budget to 3072 MiB.
QWEN3_VL_MODEL_TYPES = ("qwen3_vl", "qwen3_vl_moe")
QWEN3_VL_MIN_GPU_BYTES = 60 * 1024 * MiB
QWEN3_VL_BUDGET_MB = 3 * 1024
QWEN3_VL_MIN_RUNNING_REQUESTS = 400


def parse_env_bool(raw: str) -> bool | None:
    """SGLang's ``EnvBool`` parse: lower-cased, no strip; None where SGLang warns and uses the default."""
    value = raw.lower()
    if value in ("true", "1", "yes", "y"):
        return True
    if value in ("false", "0", "no", "n"):
        return False
    return None


def transport_errors(transport: str, nnodes: int, pp_size: int) -> list[str]:
    """SGLang's refusals of a transport for the layout, in the order SGLang checks them."""
    if transport == "cuda_vmm" and pp_size != 1:
        return [MSG_VMM_NO_PP]
    if transport == "cuda_ipc" and nnodes != 1:
        return [MSG_IPC_SINGLE_NODE]
    return []
