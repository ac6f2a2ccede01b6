"""What a vLLM plan is asked and what it answers: ``VllmRequest``, ``VllmPlan``, and their constants.

Pure core: standard library only.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from mmpool_cli.core.findings import Finding, Severity
from mmpool_cli.engines.vllm import encoder_budget as eb
from mmpool_cli.engines.vllm import processor_cache
from mmpool_cli.engines.vllm.gib import GibValue
from mmpool_cli.engines.vllm.versions import Release
from mmpool_cli.workload.hf import Model
from mmpool_cli.workload.items import Item

MiB = 1 << 20
SCHEMA_VERSION = 1
DEFAULT_CACHE_GB = 4
QWEN_VERSION = {"qwen2-vl": 2, "qwen2.5-vl": 2, "qwen3-vl": 3}
# checkpoint values where no config.json is given: context length and embedding elements per token
FAMILY_DEFAULTS = {
    "qwen2-vl": {"max_model_len": 32_768, "embed_elements": 3584},
    "qwen2.5-vl": {"max_model_len": 128_000, "embed_elements": 3584},
    "qwen3-vl": {"max_model_len": 262_144, "embed_elements": 4096 * 4},  # out_hidden_size × (1 + 3 deepstack)
    "gemma3": {"max_model_len": 131_072, "embed_elements": 2560},  # google/gemma-3-4b-it's text hidden size
}
H200 = eb.Gpu(150_754_820_096, "NVIDIA H200", (9, 0))  # torch's total_memory of an H200 (143,771 MiB)


@dataclass(frozen=True)
class VllmRequest:
    """Everything a vLLM plan depends on; ``None`` means vLLM's default."""

    release: Release
    release_source: str = "newest"
    cache_gb: GibValue | None = None
    cache_type: Literal["lru", "shm"] = "lru"
    shm_max_object_mb: int = 128
    ipc_gb: GibValue | None = None
    dp: processor_cache.DataParallel = field(default_factory=processor_cache.DataParallel)
    tp: int = 1
    max_model_len: int | None = None
    max_num_batched_tokens: int | None = None
    max_num_seqs: int | None = None
    performance_mode: str = "balanced"
    chunked_prefill: bool = True
    disable_chunked_mm_input: bool = False
    limit_mm_per_prompt: dict[str, Any] = field(default_factory=dict)
    gpu: eb.Gpu | None = None
    host_memory: int | None = None
    shm_size: int | None = None
    model: Model | None = None
    items: tuple[Item, ...] = ()
    gpu_video_backend: bool = False
    video_kwargs: dict[str, Any] = field(default_factory=dict)  # the "video" of --media-io-kwargs
    video_loader_env: str | None = None  # VLLM_VIDEO_LOADER_BACKEND
    mm_processor_kwargs: dict[str, Any] = field(default_factory=dict)
    device_normalize: bool | None = None  # --mm-device-do-normalize; None: the model class's support flag
    dtype: str | None = None  # --dtype; None: auto
    video_pruning_rate: float | None = None
    kv_dtype_bytes: int = 2
    block_size: int = 16
    origins: dict[str, str] = field(default_factory=dict)  # where each flag was written (check)


@dataclass
class VllmPlan:
    """The computed figures and findings. ``to_json`` is the ``vllm`` object."""

    version: str
    version_source: str
    processor_cache: processor_cache.ProcessorCache
    encoder_cache: dict[str, Any]
    gpu_decode_pool: dict[str, Any] | None
    findings: list[Finding]
    item_processing: dict[str, Any] | None = None  # how vLLM keeps the items' pixels (item_bytes.Processing)

    @property
    def ok(self) -> bool:
        return not any(f.severity is Severity.error for f in self.findings)

    @property
    def status(self) -> str:
        return "ok" if self.ok else "fail"

    def summary_line(self) -> str:
        """One line for a check or validate report."""
        pc, enc = self.processor_cache, self.encoder_cache
        line = f"plan: processor cache {pc.layout}, {pc.api_processes} API process(es)"
        line += f", up to {pc.host_bytes:,} B host RAM"
        if enc["budget_tokens"] is not None:
            line += f"; encoder cache {enc['budget_tokens']:,} tokens"
        if self.gpu_decode_pool is not None:
            line += f"; decode pool {self.gpu_decode_pool['bytes_per_process']:,} B per API process"
        return line

    def to_data(self) -> dict[str, Any]:
        """mmpool's JSON output of a vLLM plan: the status, the ``vllm`` object and every finding."""
        return {
            "schema_version": SCHEMA_VERSION,
            "status": "ok" if self.ok else "fail",
            "engine": "vllm",
            "vllm_version": self.version,
            "vllm": self.to_json(),
            "findings": [
                {"severity": f.severity.value, "code": f.code, "message": f.message, "location": f.location}
                for f in self.findings
            ],
        }

    def to_json(self) -> dict[str, Any]:
        """The ``vllm`` object."""
        return {
            "version": self.version,
            "version_source": self.version_source,
            "processor_cache": asdict(self.processor_cache),
            "encoder_cache": self.encoder_cache,
            "gpu_decode_pool": self.gpu_decode_pool,
            "item_processing": self.item_processing,
        }


def add_finding(
    findings: list[Finding], req: VllmRequest, severity: Severity, code: str, message: str, subject: str | None = None
) -> None:
    """Append a finding located where the launch set ``subject`` (``req.origins``)."""
    findings.append(Finding(severity, code, message, req.origins.get(subject or ""), subject))
