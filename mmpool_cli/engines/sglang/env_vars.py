"""The launch environment, read exactly as SGLang reads it, and what is wrong with it.

SGLang copies every ``SGL_X`` over ``SGLANG_X`` at import, parses integers with Python's ``int()``,
floats with ``float()`` and booleans case-insensitively without stripping, and on a parse error only
warns and uses the default. ``read_launch_env`` reads every pool variable once; ``env_findings``
reports each of SGLang's silent outcomes. Pure core: standard library only.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, replace

from mmpool_cli.core.excerpt import excerpt, shorten
from mmpool_cli.core.findings import Finding, Severity
from mmpool_cli.core.units import MiB
from mmpool_cli.engines.sglang import rules as sg
from mmpool_cli.engines.sglang import versions
from mmpool_cli.engines.sglang.models import Budget, VlmCache
from mmpool_cli.engines.sglang.versions import Release
from mmpool_cli.workload.items import quote_clipped

ENV_LOCATION = "environment"
_WRITABLE_BITS = 14_000  # about 4 214 decimal digits: under int's str() limit of 4 300
# The variables whose SGL_ twin matters for the pools (the budget's own twin is reported by the plan).
_TWINNED = (sg.ENV_RECYCLE, sg.ENV_LEGACY_TRANSPORT, sg.ENV_VLM_CACHE)


def where(environ: Mapping[str, str], variable: str | None) -> str:
    """Where ``variable`` was set: its ``--env-file`` line (``file:line:col``) when it came from one.

    ``environ`` says so through a ``places`` mapping (``inputs.dotenv.Environment``); any other
    mapping, and a variable from the process or ``--env``, is located at ``environment``.
    """
    places: Mapping[str, str] = getattr(environ, "places", {})
    return places.get(variable or "", ENV_LOCATION)


def vlm_cache_from_env(environ: Mapping[str, str]) -> VlmCache:
    """``SGLANG_VLM_CACHE_SIZE_MB`` (or its ``SGL_`` twin), parsed with ``int()``; unset is the default."""
    found = sg.env_name(sg.ENV_VLM_CACHE, environ)
    if found is None:
        return VlmCache(_newest().default_vlm_cache_mb)
    variable, raw = found
    mb = sg.parse_env_int(raw)
    return VlmCache(_newest().default_vlm_cache_mb if mb is None else mb, variable, raw, mb is None)


@dataclass(frozen=True)
class RecycleInterval:
    """``SGLANG_MM_ITEM_MEM_POOL_RECYCLE_INTERVAL_SEC`` as SGLang reads it; ``float()`` failures keep 0.05 s."""

    seconds: float
    variable: str | None = None
    raw: str | None = None
    invalid: bool = False


def recycle_from_env(environ: Mapping[str, str]) -> RecycleInterval:
    """The pool recycler's interval (or its ``SGL_`` twin), parsed with ``float()``; unset is the default."""
    found = sg.env_name(sg.ENV_RECYCLE, environ)
    if found is None:
        return RecycleInterval(sg.DEFAULT_RECYCLE_SEC)
    variable, raw = found
    seconds = sg.parse_env_float(raw)
    return RecycleInterval(sg.DEFAULT_RECYCLE_SEC if seconds is None else seconds, variable, raw, seconds is None)


@dataclass(frozen=True)
class LaunchEnv:
    """Every pool setting SGLang takes from the environment, read once."""

    budget: Budget
    budget_is_set: bool
    expandable_segments: bool
    legacy_transport_set: bool
    legacy_transport_on: bool
    vlm_cache: VlmCache
    cuda_visible_devices: str | None
    alloc_conf: str | None


def budget_from_env(environ: Mapping[str, str]) -> Budget:
    """The budget SGLang will read from ``environ``, exactly as SGLang reads it.

    ``SGL_MM_FEATURE_CACHE_MB`` overrides ``SGLANG_MM_FEATURE_CACHE_MB``; a value that Python's
    ``int()`` rejects falls back to the 1024 MiB default (``invalid`` is then True, environ.py's
    ``EnvField.get``). One that ``int()`` reads is taken as it is, however large: SGLang multiplies it
    by 2**20 (``transport/cuda_ipc.py:16``) and fails to create a pool beyond 64 bits, which the
    ``env-budget-too-large`` finding says beside the budget shown.
    """
    found = sg.env_name(sg.ENV_BUDGET, environ)
    if found is None:
        return Budget(bytes=_newest().default_budget_bytes, source="default")
    variable, raw = found
    shadowed = None
    if variable != sg.ENV_BUDGET and sg.ENV_BUDGET in environ:
        shadowed = (sg.ENV_BUDGET, environ[sg.ENV_BUDGET])
    mb = sg.parse_env_int(raw)
    # SGLang warns and takes its default when int() fails; a huge number it takes as it is, shown
    # exactly unless its bytes have more digits than Python writes out (int's 4 300), where only
    # the failure can be shown
    invalid = mb is None or abs(mb * MiB).bit_length() > _WRITABLE_BITS
    return Budget(
        bytes=_newest().default_budget_bytes if invalid or mb is None else mb * MiB,
        source="env",
        variable=variable,
        raw=raw,
        invalid=invalid,
        shadowed=shadowed,
    )


def read_launch_env(environ: Mapping[str, str]) -> LaunchEnv:
    """The pool settings of ``environ`` as SGLang's processes will read them."""
    legacy = sg.env_name(sg.ENV_LEGACY_TRANSPORT, environ)
    alloc_conf = environ.get(sg.ENV_ALLOC_CONF)
    return LaunchEnv(
        budget=budget_from_env(environ),
        # SGLang's ``is_set()``: the name is present, whatever its value
        budget_is_set=sg.env_name(sg.ENV_BUDGET, environ) is not None,
        expandable_segments=sg.expandable_segments_enabled(alloc_conf),
        legacy_transport_set=legacy is not None,
        legacy_transport_on=legacy is not None and bool(sg.parse_env_bool(legacy[1])),
        vlm_cache=vlm_cache_from_env(environ),
        cuda_visible_devices=environ.get("CUDA_VISIBLE_DEVICES"),
        alloc_conf=alloc_conf,
    )


def resolve_budget(launch: LaunchEnv, flag: Budget | None = None, config: Budget | None = None) -> Budget:
    """The budget that counts: a flag, else a config file, else the environment, else SGLang's default."""
    return flag or config or launch.budget


def env_findings(environ: Mapping[str, str]) -> list[Finding]:
    """What SGLang will silently do with the pool variables in ``environ`` (the budget aside)."""
    findings: list[Finding] = []

    def add(severity: Severity, code: str, message: str, variable: str) -> None:
        findings.append(Finding(severity, code, message, where(environ, variable)))

    for name in _TWINNED:
        legacy = "SGL_" + name.removeprefix("SGLANG_")
        if legacy in environ and name in environ and environ[legacy] != environ[name]:
            add(
                Severity.warning,
                "env-legacy-overrides",
                f"{legacy}={shorten(environ[legacy])} overrides {name}={shorten(environ[name])} (SGLang copies SGL_ "
                f"variables over SGLANG_ ones); unset {legacy}",
                legacy,
            )
    vlm = vlm_cache_from_env(environ)
    findings += [replace(f, location=where(environ, vlm.variable)) for f in vlm_cache_findings(vlm)]
    recycle = recycle_from_env(environ)
    if recycle.variable is not None:
        variable, raw, interval = recycle.variable, recycle.raw or "", recycle.seconds
        if recycle.invalid:
            add(
                Severity.warning,
                "env-recycle-invalid",
                f"{variable}={excerpt(raw)} is not a number to Python's float(): SGLang only warns and uses "
                f"{sg.DEFAULT_RECYCLE_SEC} s; set a positive number of seconds, e.g. 0.05",
                variable,
            )
        elif math.isnan(interval):
            add(
                Severity.error,
                "env-recycle-nan",
                f"{variable}={shorten(raw)}: NaN passes SGLang's check, and the pool recycler then spins without "
                "pausing, taking a CPU core; set a positive number of seconds, e.g. 0.05",
                variable,
            )
        elif interval <= 0:
            add(
                Severity.error,
                "env-recycle-not-positive",
                f"{variable}={shorten(raw)}: every pool fails with '{sg.MSG_RECYCLE_NOT_POSITIVE}'; "
                "set a positive number of seconds, e.g. 0.05",
                variable,
            )
        elif interval > sg.MAX_WAIT_SEC:
            add(
                Severity.error,
                "env-recycle-too-large",
                f"{variable}={shorten(raw)}: the recycler thread dies on its first wait (OverflowError), so pool "
                "space is never given back and every feature soon takes the CPU path; set e.g. 0.05",
                variable,
            )
    found = sg.env_name(sg.ENV_LEGACY_TRANSPORT, environ)
    if found is not None:
        variable, raw = found
        on = sg.parse_env_bool(raw)
        if on is None:
            add(
                Severity.warning,
                "env-legacy-transport-invalid",
                f"{variable}={excerpt(raw)} is not a boolean to SGLang "
                f"('\"{shorten(raw.lower())}\" is not a valid boolean value'): it counts as set and false, "
                "so an unset --mm-feature-transport resolves to cpu; unset it and use --mm-feature-transport",
                variable,
            )
        else:
            add(
                Severity.warning,
                "env-legacy-transport",
                f"{variable}={shorten(raw)} is deprecated: SGLang says 'SGLANG_USE_CUDA_IPC_TRANSPORT is deprecated; "
                f"use --mm-feature-transport={'cuda_ipc' if on else 'cpu'} instead.'",
                variable,
            )
    return findings


def vlm_cache_findings(vlm: VlmCache) -> list[Finding]:
    """What SGLang does with a ``SGLANG_VLM_CACHE_SIZE_MB`` it cannot use (environ.py ``EnvInt``): one rule for all.

    ``int()`` failing: SGLang warns and uses its default. A negative number it takes as it is: the
    embedding cache then keeps nothing (``data_size > max_size``, mem_cache/multimodal_cache.py) and
    the KV reservation, ``SGLANG_VLM_CACHE_SIZE_MB + SGLANG_MM_FEATURE_CACHE_MB``
    (mem_cache/kv_cache_configurator.py:210), falls short of the pools it is for.
    """
    if vlm.variable is None:
        return []
    raw = quote_clipped(vlm.raw or "")
    if vlm.invalid:
        return [
            Finding(
                Severity.warning,
                "env-vlm-cache-invalid",
                f"{vlm.variable}={raw} is not an integer: SGLang only warns and uses its default "
                f"{_newest().default_vlm_cache_mb} MiB; set it to a whole number of MiB",
                subject="env",
            )
        ]
    if vlm.mb < 0:
        return [
            Finding(
                Severity.warning,
                "env-vlm-cache-negative",
                f"{vlm.variable}={raw}: SGLang takes it as it is: its embedding cache keeps nothing, and the KV "
                f"reservation is {sg.ENV_BUDGET} - {-vlm.mb} MiB, short of the pools it is for by {-vlm.mb} MiB; "
                "set 0 for no cache, or a positive number of MiB",
                subject="env",
            )
        ]
    return []


def budget_override() -> Budget:
    """The budget after the Qwen3-VL override sets ``SGLANG_MM_FEATURE_CACHE_MB=3072``."""
    return Budget(
        bytes=sg.QWEN3_VL_BUDGET_MB * MiB, source="env", variable=sg.ENV_BUDGET, raw=str(sg.QWEN3_VL_BUDGET_MB)
    )


def _newest() -> Release:
    # The defaults of a reading made before a release is chosen; eras.release_budget gives a default
    # budget the planned release's own value, from the same record.
    return versions.release(versions.NEWEST)
