"""What the pool reservation costs in KV-cache tokens, as SGLang 0.5.23 sizes the KV cache.

SGLang subtracts ``SGLANG_MM_FEATURE_CACHE_MB + SGLANG_VLM_CACHE_SIZE_MB`` (the whole budget, on
every rank) from the KV-cache memory of a multimodal model under cuda_ipc or cuda_vmm
(``kv_cache_configurator.py::mm_runtime_reservation_gb``), and turns bytes into tokens as
``(bytes // cell) // page * page`` with ``cell`` the bytes of one token on one rank
(``pool_configurator.py::_compute_cell_size``). Pure core: standard library only.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from mmpool_cli.core.units import MiB

# SGLang's --kv-cache-dtype choices with a plain element size (mxfp8 and the FP4 recipes add
# scale buffers mmpool does not model); "auto" follows the model's dtype, and SGLang serves
# float32 checkpoints in 16 bits.
KV_DTYPE_BYTES = {"auto": 2, "bf16": 2, "bfloat16": 2, "fp8_e5m2": 1, "fp8_e4m3": 1}


@dataclass(frozen=True)
class KvModel:
    """The attention shape of a model's text config, as SGLang's ``ModelConfig`` reads it."""

    attention: Literal["mha", "mla"]
    layers: int
    kv_heads: int | None = None
    head_dim: int | None = None
    v_head_dim: int | None = None
    kv_lora_rank: int | None = None
    qk_rope_head_dim: int | None = None
    multimodal: bool = True
    approximate: str | None = None  # why the figure is approximate (hybrid SWA, Mamba, ...)


@dataclass(frozen=True)
class KvRequest:
    """What the KV cost needs beyond the pool layout: the model, the KV flags and the VLM cache."""

    model: KvModel
    vlm_cache_mb: int  # as the release reads SGLANG_VLM_CACHE_SIZE_MB, or its default
    kv_cache_dtype: str = "auto"
    page_size: int = 1
    vlm_cache_variable: str | None = None  # the variable it was read from; None for SGLang's default
    vlm_cache_raw: str | None = None
    vlm_cache_invalid: bool = False
    qwen3_vl: bool = False


@dataclass(frozen=True)
class KvCost:
    """The KV-cache tokens the reservation takes from ``max_total_num_tokens``. Field order is the JSON order."""

    attention: Literal["mha", "mla"]
    layers: int
    kv_heads: int | None
    kv_heads_per_rank: int | None
    head_dim: int | None
    v_head_dim: int | None
    kv_lora_rank: int | None
    qk_rope_head_dim: int | None
    kv_cache_dtype: str
    dtype_bytes: int
    cell_bytes: int
    page_size: int
    multimodal: bool
    feature_budget_mb: int
    vlm_cache_mb: int
    reserved_bytes: int
    tokens_min: int
    tokens_max: int
    landing_bytes: int | None
    landing_tokens_max: int | None
    approximate: bool
    approximate_reason: str | None


def cell_bytes(model: KvModel, attn_tp: int, dtype_bytes: int) -> tuple[int, int | None]:
    """Bytes of one token's KV cache on one rank, and the KV heads each rank keeps (MHA/GQA).

    MHA/GQA: ``max(1, kv_heads // attn_tp) × (head_dim + v_head_dim) × layers × dtype``;
    MLA: ``(kv_lora_rank + qk_rope_head_dim) × layers × dtype``, the same on every rank.
    """
    if model.attention == "mla":
        return ((model.kv_lora_rank or 0) + (model.qk_rope_head_dim or 0)) * model.layers * dtype_bytes, None
    per_rank = max(1, (model.kv_heads or 0) // attn_tp)
    return per_rank * ((model.head_dim or 0) + (model.v_head_dim or 0)) * model.layers * dtype_bytes, per_rank


def tokens_range(nbytes: int, cell: int, page: int) -> tuple[int, int]:
    """The fewest and most tokens of ``max_total_num_tokens`` that ``nbytes`` less memory removes.

    The count is ``⌊X/cell⌋_page − ⌊(X − nbytes)/cell⌋_page`` for an unknown X: one of the two
    page multiples around ``nbytes / cell``.
    """
    unit = cell * page
    return nbytes // unit * page, -(-nbytes // unit) * page


def kv_cost(
    model: KvModel,
    *,
    attn_tp: int,
    kv_cache_dtype: str,
    page_size: int,
    budget_mb: int,
    vlm_cache_mb: int,
    landing_extra_bytes: int | None,
) -> KvCost:
    """The KV cost of the reservation for ``model`` at this layout.

    ``landing_extra_bytes`` is what a single tokenizer process adds on the base GPU (its pool as
    the allocator rounds it, plus its CUDA context) when it lands while SGLang measures memory
    for the KV cache; None where that race does not apply.
    """
    dtype_bytes = KV_DTYPE_BYTES[kv_cache_dtype]
    cell, per_rank = cell_bytes(model, attn_tp, dtype_bytes)
    reserved = (budget_mb + vlm_cache_mb) * MiB if model.multimodal else 0
    low, high = tokens_range(reserved, cell, page_size)
    landing = landing_tokens = None
    if landing_extra_bytes is not None and model.multimodal:
        landing = reserved + landing_extra_bytes
        landing_tokens = tokens_range(landing, cell, page_size)[1]
    return KvCost(
        attention=model.attention,
        layers=model.layers,
        kv_heads=model.kv_heads,
        kv_heads_per_rank=per_rank,
        head_dim=model.head_dim,
        v_head_dim=model.v_head_dim,
        kv_lora_rank=model.kv_lora_rank,
        qk_rope_head_dim=model.qk_rope_head_dim,
        kv_cache_dtype=kv_cache_dtype,
        dtype_bytes=dtype_bytes,
        cell_bytes=cell,
        page_size=page_size,
        multimodal=model.multimodal,
        feature_budget_mb=budget_mb,
        vlm_cache_mb=vlm_cache_mb,
        reserved_bytes=reserved,
        tokens_min=low,
        tokens_max=high,
        landing_bytes=landing,
        landing_tokens_max=landing_tokens,
        approximate=model.approximate is not None,
        approximate_reason=model.approximate,
    )
