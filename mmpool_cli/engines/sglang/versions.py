"""The SGLang releases mmpool knows, and each one's multimodal pool rules.

The facts come from ``data/releases.json``, which ``scripts/gen_sglang_tables.py`` reads out of
every wheel from 0.5.10 to 0.5.23; this module maps them onto the rules ``make_plan`` applies and
refuses a fact it does not know, so a regenerated table with a new shape fails loudly here
instead of being planned with the wrong rules. The table is read once, on first use.

Which release applies: ``--sglang-version``, else ``MMPOOL_SGLANG_VERSION``, else the ``sglang``
distribution installed next to mmpool (its metadata only: SGLang is never imported), else the
newest known. Pure core: standard library only.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, cast

from mmpool_cli.core import releases
from mmpool_cli.core.units import MiB, align_up
from mmpool_cli.engines.sglang.rules import VMM_CONTROL_ALIGNMENT, smallest_budget_mb

DATA_DIR = Path(__file__).resolve().parent / "data"
ENV_VERSION = "MMPOOL_SGLANG_VERSION"
# The newest release in the tables (a test keeps it equal to the data): the default of a
# PlanRequest, known without reading the table.
NEWEST = "0.5.23"
# The release mmpool's hand-written texts were read from: SGLang's messages and start-up refusals
# (rules.py, startup.py) and the model-family table (workload.families). Other releases are assumed
# to word them alike, and reports say so.
TEXTS_FROM = "0.5.23"

Split = Literal["none", "floor", "exact"]
Chosen = Literal["--sglang-version", "MMPOOL_SGLANG_VERSION", "installed", "newest"]


@dataclass(frozen=True)
class Release:
    """One SGLang release's pool rules, as mmpool applies them."""

    version: str
    default_budget_mb: int
    default_vlm_cache_mb: int
    split: Split
    floor_bytes: int  # the per-worker minimum of the "floor" split, else 0
    stream_ordered: bool  # the pool with a control header (else the shm-counter pool)
    on_base_gpu: bool  # the pool is on cuda:{base_gpu_id} (else the process's current device)
    control_word_bytes: int
    data_alignment: int  # 1: the shm pool does not align
    max_inflight_slices: int | None  # None: the shm pool has no slot cap
    transport_flag: bool  # --mm-feature-transport exists (else SGLANG_USE_CUDA_IPC_TRANSPORT decides)
    transports: tuple[str, ...]  # what the transport can be: cpu plus the pool transports
    default_policy: Literal["env", "opt-in", "auto-cuda_ipc-single-node", "cpu-single-node"]
    attn_dp_consumers: bool  # C = tp // (dp * attn_dp) under attention DP (else C = tp)
    kv_reserves: tuple[str, ...]  # transports whose budget is taken out of the KV cache
    kv_reservation: bool  # the KV-cache sizing reserves anything for multimodal at all
    positional_pool: bool
    qwen3_vl_override: bool  # Qwen3-VL on large Hopper GPUs picks cuda_ipc and a 3072 MiB budget itself
    pool_flags: frozenset[str]  # which of the pool-related flags this release has

    @property
    def pool_transports(self) -> tuple[str, ...]:
        """The transports that create a GPU pool."""
        return tuple(t for t in self.transports if t != "cpu")

    def unasked_transport(self, legacy_on: bool | None) -> str:
        """What the transport resolves to when the launch does not set it: a multimodal model on one node.

        ``legacy_on``: ``SGLANG_USE_CUDA_IPC_TRANSPORT`` read as SGLang reads it, None when unset. Only
        the 0.5.17 era picked cuda_ipc itself; before and after, a pool is opt-in (the Qwen3-VL
        override on large Hopper GPUs and --encoder-only aside, which the resolution handles).
        """
        if legacy_on is not None:
            return "cuda_ipc" if legacy_on else "cpu"
        return "cuda_ipc" if self.default_policy == "auto-cuda_ipc-single-node" else "cpu"

    def has(self, option: str) -> bool:
        """Whether this release's server parser has ``option`` (one of the pool-related flags)."""
        return option in self.pool_flags

    def per_worker(self, effective: int, workers: int) -> int:
        """Bytes of each tokenizer worker's pool for a budget of ``effective`` bytes (``workers`` > 0).

        0.5.10: no split, every worker allocates the whole budget; 0.5.11-0.5.15:
        ``max(B // W, 128 MiB)``; from 0.5.16: ``B // W``.
        """
        if self.split == "none":
            return effective
        if self.split == "floor":
            return max(effective // workers, self.floor_bytes)
        return effective // workers

    def header_bytes(self, consumers: int) -> int:
        """The control header at the start of each pool: a ready word and C ack words per slot.

        0 for the shm-counter pool, which keeps its counters in POSIX shared memory.
        """
        if not self.stream_ordered or self.max_inflight_slices is None:
            return 0
        words = self.max_inflight_slices * (1 + consumers) * self.control_word_bytes
        return align_up(words, self.data_alignment)

    def slice_bytes(self, nbytes: int) -> int:
        """Bytes one feature takes in a cuda_ipc pool (the shm pool does not align)."""
        return align_up(nbytes, self.data_alignment)

    def fit(self, usable: int, nbytes: int) -> int:
        """How many features of ``nbytes`` (> 0) fit in a fresh cuda_ipc pool of ``usable`` bytes."""
        count = usable // self.slice_bytes(nbytes)
        return count if self.max_inflight_slices is None else min(count, self.max_inflight_slices)

    def vmm_lease_control_bytes(self, consumers: int) -> int:
        """Control bytes at the head of every cuda_vmm lease (one ack word per consumer)."""
        return align_up(consumers * self.control_word_bytes, VMM_CONTROL_ALIGNMENT)

    def vmm_slice_bytes(self, nbytes: int, consumers: int) -> int:
        """Bytes one feature of ``nbytes`` takes in a cuda_vmm pool, its control words included."""
        return align_up(self.vmm_lease_control_bytes(consumers) + nbytes, VMM_CONTROL_ALIGNMENT)

    def vmm_fit(self, allocation: int, nbytes: int, consumers: int) -> int:
        """How many features of ``nbytes`` fit in a fresh cuda_vmm pool (it has no slot cap)."""
        return allocation // self.vmm_slice_bytes(nbytes, consumers)

    def smallest_valid_budget_mb(self, workers: int, transport: str, consumers: int, granularity: int) -> int:
        """The smallest ``SGLANG_MM_FEATURE_CACHE_MB`` that SGLang accepts for this layout.

        cuda_ipc needs each worker's share to exceed its control header; cuda_vmm needs it to
        reach one VMM granule.
        """
        minimum = granularity if transport == "cuda_vmm" else self.header_bytes(consumers) + 1
        return smallest_budget_mb(workers, minimum)

    @property
    def default_budget_bytes(self) -> int:
        """``SGLANG_MM_FEATURE_CACHE_MB``'s default, in bytes: the budget when it is unset or unreadable."""
        return self.default_budget_mb * MiB


def _facts() -> dict[str, Any]:
    with open(DATA_DIR / "releases.json", encoding="utf-8") as f:
        facts: dict[str, Any] = json.load(f)
    return facts


@functools.cache
def _table() -> dict[str, Release]:
    return {r["version"]: _release(r) for r in _facts()["releases"]}


def known() -> tuple[str, ...]:
    """Every release mmpool has rules for, oldest first."""
    return tuple(_table())


def supported_range() -> str:
    """The known releases as text: ``0.5.10 … 0.5.23 (18 releases)``."""
    return releases.supported_range(known())


def release(version: str) -> Release:
    """The rules of ``version``; an unknown one is a usage error listing the known range."""
    return releases.lookup(_table(), version, "SGLang", "scripts/gen_sglang_tables.py")


def first_with(option: str) -> str | None:
    """The oldest known release whose parser has ``option`` (one of the pool-related flags)."""
    return next((v for v, rel in _table().items() if rel.has(option)), None)


def installed_version() -> str | None:
    """The version of the ``sglang`` distribution on ``sys.path``, from its metadata; None without one."""
    return releases.installed_version("sglang")
    from importlib import metadata

    try:
        return metadata.version("sglang")
    except metadata.PackageNotFoundError:
        return None


def choose(flag: str | None, environ: Mapping[str, str]) -> tuple[Release, Chosen]:
    """The release to plan for and how it was chosen (flag, environment, installed, newest)."""
    newest = _table()[known()[-1]]
    found, chosen = releases.choose(
        release,
        newest,
        flag,
        "--sglang-version",
        environ,
        ENV_VERSION,
        installed_version(),
        "sglang",
        supported_range(),
    )
    return found, cast(Chosen, chosen)


def how_chosen(chosen: str) -> str:
    """A phrase for reports: why this release's rules apply (``chosen`` as ``choose`` gives it)."""
    phrases: dict[str, str] = {
        "--sglang-version": "from --sglang-version",
        "MMPOOL_SGLANG_VERSION": f"from {ENV_VERSION}",
        "installed": "the installed sglang",
        "newest": "newest known",
    }
    return phrases.get(chosen, chosen)


def _release(r: dict[str, Any]) -> Release:
    version = r["version"]

    def bad(what: str) -> RuntimeError:
        return RuntimeError(f"releases.json: SGLang {version}: {what} is not a shape mmpool knows")

    env = r["env"]
    pool = r["pool"]
    if r["split"] not in ("none", "floor", "exact"):
        raise bad(f"split {r['split']!r}")
    if pool["kind"] not in ("shm", "stream-ordered") or pool["device"] not in ("current", "base_gpu_id"):
        raise bad(f"pool {pool['kind']!r} on {pool['device']!r}")
    transport = r["transport"]
    if transport["policy"] not in ("env", "opt-in", "auto-cuda_ipc-single-node", "cpu-single-node"):
        raise bad(f"transport policy {transport['policy']!r}")
    consumers = r["consumers"]
    if consumers not in ("tp", "tp (shm counter)", "tp // dp-ranks under attention DP"):
        raise bad(f"consumer count {consumers!r}")
    constants = pool["constants"] or {}
    reservation = r["kv_reservation"]
    return Release(
        version=version,
        default_budget_mb=env["SGLANG_MM_FEATURE_CACHE_MB"]["default"],
        default_vlm_cache_mb=env.get("SGLANG_VLM_CACHE_SIZE_MB", {}).get("default", 100),
        split=r["split"],
        floor_bytes=r.get("floor_bytes", 0),
        stream_ordered=pool["kind"] == "stream-ordered",
        on_base_gpu=pool["device"] == "base_gpu_id",
        control_word_bytes=constants.get("CONTROL_WORD_BYTES", 4),
        data_alignment=constants.get("DATA_ALIGNMENT", 1),
        max_inflight_slices=constants.get("DEFAULT_MAX_INFLIGHT_SLICES"),
        transport_flag=transport["choices"] is not None,
        transports=tuple(transport["choices"] or ("cpu", "cuda_ipc")),
        default_policy=transport["policy"],
        attn_dp_consumers=consumers.startswith("tp //"),
        kv_reserves=tuple(reservation["budget_for"]) if reservation else (),
        kv_reservation=reservation is not None,
        positional_pool=r["positional_pool"] is not None,
        qwen3_vl_override=r["qwen3_vl_override"] is not None,
        pool_flags=frozenset(r["pool_flags"]),
    )
