"""What ``mmpool cache`` asks an engine: the items of the traffic, the model, and how it is served.

Pure core: standard library only.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

from mmpool_cli.caches.from_trace import request_of
from mmpool_cli.caches.report import DEFAULT_TARGET, CacheItem, CacheNote
from mmpool_cli.inputs.traffic.prompts import Timed
from mmpool_cli.inputs.traffic.writer import Lease
from mmpool_cli.workload.families import Family


@dataclass(frozen=True)
class ModelShape:
    """What sizes an embedding: the row width the encoder gives the text model, and its dtype's bytes."""

    hidden_size: int | None  # the text model's hidden size (None: unknown)
    deepstack: int | None = None  # Qwen3-VL: the vision layers whose features ride along (None: unknown)
    dtype_bytes: int = 2  # bfloat16, what SGLang serves these checkpoints in
    kv_cell_bytes: int | None = None  # one token's KV bytes on one rank, where the model gives it
    where: str = ""  # where it was read (a config.json), or the flag


@dataclass(frozen=True)
class PrefixOptions:
    """How the engine's prefix cache is set in the launch, and where the model's tokenizer is."""

    capacity_tokens: int | None = None  # the KV capacity in tokens (--max-total-tokens); None: not given
    disabled: bool = False  # the launch turns the prefix cache off
    page_size: int = 1
    tokenizer: str | None = None  # --tokenizer-path / --tokenizer: a folder or a hub name in the local cache
    model_dir: str | None = None  # --model DIR: its tokenizer, where it has one


@dataclass(frozen=True)
class CacheRequest:
    """The traffic's items in time order and the deployment that serves them."""

    family: Family
    settings: dict[str, Any]
    items: list[CacheItem]
    source: str  # what was read, for the report
    shape: ModelShape
    environ: Mapping[str, str] = field(default_factory=dict)
    preprocess_mb: int | None = None  # --mm-preprocess-cache-size-mb (None: the processor's auto size)
    workers: int = 1  # --tokenizer-worker-num
    gpu_name: str | None = None  # the GPU that serves it (engines with GPU-dependent defaults read it)
    target: Fraction = DEFAULT_TARGET
    notes: list[CacheNote] = field(default_factory=list)
    # each request (as the items name it) -> its prompt and times, where the traffic carries them
    prompts: Mapping[str, Timed] = field(default_factory=dict)
    prefix: PrefixOptions = PrefixOptions()


def items_of(leases: Iterable[Lease], keys: Mapping[object, str]) -> list[CacheItem]:
    """The cache items of converted traffic's leases (one per item), keyed by ``keys`` (alloc id -> content key)."""
    kinds: dict[str, str] = {}  # an item's label -> its kind (a log's items share a few labels)
    out: list[CacheItem] = []
    key_of = keys.get
    for lease in leases:
        label = lease.item
        kind = kinds.get(label)
        if kind is None:
            kind = kinds[label] = label.split(" ", 1)[0]
        out.append(CacheItem(request_of(lease.id), kind, key_of(lease.id), lease.nbytes, label))
    return out
