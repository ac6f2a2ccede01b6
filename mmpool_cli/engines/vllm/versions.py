"""The vLLM releases mmpool knows, and each one's multimodal memory rules.

The facts come from ``data/releases.json``, which ``scripts/gen_vllm_tables.py`` reads out of every
wheel from 0.30.0 to 0.34.0; this module refuses a fact whose shape it does not know, so a
regenerated table with a new rule fails here instead of being planned with the old one.

Which release applies: ``--vllm-version``, else ``MMPOOL_VLLM_VERSION``, else the ``vllm``
distribution installed next to mmpool (its metadata only: vLLM is never imported), else the
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

DATA_DIR = Path(__file__).resolve().parent / "data"
ENV_VERSION = "MMPOOL_VLLM_VERSION"
NEWEST = "0.34.0"

Chosen = Literal["--vllm-version", "MMPOOL_VLLM_VERSION", "installed", "newest"]


@dataclass(frozen=True)
class Release:
    """One vLLM release's multimodal memory rules, as mmpool applies them."""

    version: str
    batch_defaults: Mapping[str, Any]  # the GPU tiers of max_num_batched_tokens (encoder_budget reads them)
    shm_extra_bytes: int  # bytes the /dev/shm segment has beyond the budget (the handle-signing secret)
    gpu_decode_pool: bool  # --mm-ipc-gpu-memory-gb exists, split per API process
    limit_default: int  # items per modality when --limit-mm-per-prompt leaves it out
    model_default: str  # what vllm serve serves without a model
    device_normalize: Mapping[str, bool]  # family -> its model class sets supports_mm_device_do_normalize
    at: Mapping[str, str]  # where each rule is in the release's source


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
    """The known releases as text: ``0.30.0 … 0.34.0 (5 releases)``."""
    return releases.supported_range(known())


def release(version: str) -> Release:
    """The rules of ``version``; an unknown one is a usage error listing the known releases."""
    return releases.lookup(_table(), version, "vLLM", "scripts/gen_vllm_tables.py")


def installed_version() -> str | None:
    """The version of the ``vllm`` distribution on ``sys.path``, from its metadata; None without one."""
    return releases.installed_version("vllm")
    from importlib import metadata

    try:
        return metadata.version("vllm")
    except metadata.PackageNotFoundError:
        return None


def choose(flag: str | None, environ: Mapping[str, str]) -> tuple[Release, Chosen]:
    """The release to plan for and how it was chosen (flag, environment, installed, newest)."""
    newest = _table()[known()[-1]]
    installed = installed_version()
    if installed is not None:
        installed = installed.split("+")[0]  # a local build (+cu130) is its release
    found, chosen = releases.choose(
        release,
        newest,
        flag,
        "--vllm-version",
        environ,
        ENV_VERSION,
        installed,
        "vllm",
        supported_range(),
    )
    return found, cast(Chosen, chosen)


def how_chosen(chosen: str) -> str:
    """A phrase for reports: why this release's rules apply."""
    phrases = {
        "--vllm-version": "from --vllm-version",
        "MMPOOL_VLLM_VERSION": f"from {ENV_VERSION}",
        "installed": "the installed vllm",
        "newest": "newest known",
    }
    return phrases.get(chosen, chosen)


def _release(r: dict[str, Any]) -> Release:
    version = r["version"]

    def bad(what: str) -> RuntimeError:
        return RuntimeError(f"releases.json: vLLM {version}: {what} is not a shape mmpool knows")

    cache = r["processor_cache"]
    if cache["rule"] != "ipc-needs-one-api-process-and-dp1-or-external-lb":
        raise bad(f"the processor cache rule {cache['rule']!r}")
    if not cache["render"]["render_only_cache"]:
        raise bad("a release without the render-only cache")
    if r["encoder_cache"]["rule"] != "max(max_num_batched_tokens, max_tokens_per_item)":
        raise bad(f"the encoder cache rule {r['encoder_cache']['rule']!r}")
    batch = r["batch_defaults"]
    tiers = batch["tiers"]
    if not tiers or tiers[-1]["min_memory_gib"] is not None or len(batch["server_seqs"]) != len(tiers):
        raise bad("the batch-default tiers")
    if not (batch["throughput_doubles"] and batch["clamped_to_seqs_times_len"]):
        raise bad("the batch-default adjustments")
    pool = r["gpu_decode_pool"]
    norm = r["mm_device_do_normalize"]
    if norm["cli_default"] is not None or norm["rule"] != (
        "none-is-the-model-class-support-flag; unsupported-forced-off; on-skips-rescale-and-normalize; "
        "floating-tensors-cast-to-model-dtype"
    ):
        raise bad(f"the --mm-device-do-normalize rule {norm['rule']!r}")
    return Release(
        version=version,
        batch_defaults=batch,
        shm_extra_bytes=int(cache["shm"]["extra_bytes"]),
        gpu_decode_pool=pool is not None,
        limit_default=int(r["limit_mm_per_prompt"]["default"]),
        model_default=str(r["model_default"]),
        device_normalize={str(k): bool(v) for k, v in norm["supported"].items()},
        at={
            "batch_defaults": batch["at"],
            "processor_cache": cache["at"],
            "render_only_cache": cache["render"]["at"],
            "shm": cache["shm"]["at"],
            "encoder_cache": r["encoder_cache"]["at"],
            "limit_mm_per_prompt": r["limit_mm_per_prompt"]["at"],
            "mm_device_do_normalize": norm["resolve_at"],
            "device_normalize_kwargs": norm["merge_at"],
            "model_dtype_cast": norm["cast_at"],
            **({"gpu_decode_pool": pool["split_at"], "kv_reservation": pool["reserve_at"]} if pool else {}),
        },
    )
