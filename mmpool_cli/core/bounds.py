"""The sane range of every number mmpool is asked to plan with, beyond what SGLang itself refuses.

SGLang checks only that counts are positive; a budget of 10^30 bytes or a 3-byte VMM granularity
would plan without complaint and fail on the GPU. These bounds are physical: no GPU has more
memory than ``LARGEST_GPU_HBM_BYTES``, and CUDA's VMM granularity is a power of two. Pure core.
"""

from __future__ import annotations

from mmpool_cli.core.excerpt import shorten
from mmpool_cli.core.units import format_binary

KiB, MiB, GiB = 1 << 10, 1 << 20, 1 << 30

# The most memory one GPU has (NVIDIA B300 and AMD MI355X: 288 GB of HBM3e, 288 GiB raw); every
# pool lives on one GPU, so no budget, pool or estimate can exceed it.
LARGEST_GPU_HBM_BYTES = 288 * GiB
LARGEST_GPU = "NVIDIA B300"
# Tokenizer workers are processes with a CUDA context each (~527 MiB) on one GPU; parallel sizes
# count GPUs. Beyond these no deployment exists, and a plan would only describe an impossibility.
MAX_WORKERS = 1024
MAX_PARALLEL = 4096
# The most RAM one host takes (HPE Superdome Flex: 48 TB, the largest single-system x86 server),
# rounded up: a host cache planned beyond it describes no machine.
LARGEST_HOST_MEMORY_BYTES = 64 * (1 << 40)
LARGEST_HOST = "HPE Superdome Flex"
MIN_GRANULARITY, MAX_GRANULARITY = 4 * KiB, 1 * GiB
MIN_CONTEXT = 1 * MiB
# How long a pipe or FIFO (stdin included) may stay silent before reading it is given up, and the
# most a user may allow (simulate's --idle-timeout takes the same bounds).
IDLE_TIMEOUT_S = 30.0
MAX_IDLE_TIMEOUT_S = 10**6


def count_problem(value: int, limit: int, what: str) -> str | None:
    """Why ``value`` workers or ranks is more than any deployment has, or None (the same words from every front end).

    >>> count_problem(99999999999, MAX_WORKERS, "tokenizer workers")
    '99999999999: mmpool plans at most 1024 tokenizer workers'
    """
    return f"{shorten(str(value))}: mmpool plans at most {limit} {what}" if value > limit else None


def gpu_id_problem(value: int) -> str | None:
    """Why ``value`` cannot be the id of a node's GPU, or None (ids count from 0, nodes have few GPUs).

    >>> gpu_id_problem(4097)
    '4097: no node has a GPU 4097; mmpool plans GPU ids up to 4096'
    """
    if value > MAX_PARALLEL:
        shown = shorten(str(value))  # a file may hold an integer of thousands of digits
        return f"{shown}: no node has a GPU {shown}; mmpool plans GPU ids up to {MAX_PARALLEL}"
    return None


def largest_gpu() -> str:
    """``288 GiB (NVIDIA B300)``: how messages name the bound."""
    return f"{format_binary(LARGEST_GPU_HBM_BYTES)} ({LARGEST_GPU})"


def largest_host() -> str:
    """``64 TiB (HPE Superdome Flex)``: how messages name the bound on one host's RAM."""
    return f"{format_binary(LARGEST_HOST_MEMORY_BYTES)} ({LARGEST_HOST})"


def granularity_problem(nbytes: int) -> str | None:
    """Why ``nbytes`` cannot be a CUDA VMM granularity, or None when it can."""
    if nbytes & (nbytes - 1) or not MIN_GRANULARITY <= nbytes <= MAX_GRANULARITY:
        return (
            f"{nbytes:,} bytes is not a CUDA VMM granularity: it is a power of two from "
            f"{format_binary(MIN_GRANULARITY)} to {format_binary(MAX_GRANULARITY)} (2MiB on current NVIDIA GPUs)"
        )
    return None


def context_problem(nbytes: int) -> str | None:
    """Why ``nbytes`` cannot be one process's CUDA context, or None when it can."""
    if not MIN_CONTEXT <= nbytes <= LARGEST_GPU_HBM_BYTES:
        return (
            f"{nbytes:,} bytes is not a CUDA context: use {format_binary(MIN_CONTEXT)} to {largest_gpu()} "
            "(about 527MiB with torch on an H200; 'mmpool probe' measures it)"
        )
    return None


def gpu_memory_problem(nbytes: int) -> str | None:
    """Why ``nbytes`` cannot be one GPU's total memory, or None when it can."""
    if not 1 * GiB <= nbytes <= LARGEST_GPU_HBM_BYTES:
        return f"{nbytes:,} bytes is not a GPU's memory: use 1GiB to {largest_gpu()}"
    return None
