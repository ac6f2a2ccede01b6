"""The launch environment, read exactly as SGLang 0.5.23 reads it, and what is wrong with it.

SGLang copies every ``SGL_X`` over ``SGLANG_X`` at import, parses integers with Python's ``int()``,
floats with ``float()`` and booleans case-insensitively without stripping, and on a parse error only
warns and uses the default. mmpool reports each of those silent outcomes. ``--env-file`` files are
dotenv-style. Pure core: standard library only.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping

from mmpool_cli.core.models import Budget, Finding, Severity
from mmpool_cli.errors import MmpoolError
from mmpool_cli.inputs.yamlsrc import decode, read_bytes
from mmpool_cli.sglang import rules as sg

ENV_LOCATION = "environment"
_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# The variables whose SGL_ twin matters for the pools (the budget's own twin is reported by the plan).
_TWINNED = (sg.ENV_RECYCLE, sg.ENV_LEGACY_TRANSPORT, sg.ENV_VLM_CACHE)


class EnvArgError(MmpoolError):
    """An ``--env`` argument that is not ``KEY=VALUE`` (a usage error)."""


def parse_env_arg(text: str) -> tuple[str, str]:
    """``KEY=VALUE`` from an ``--env`` argument.

    Raises:
        EnvArgError: there is no ``=`` or the key is not a variable name.
    """
    key, eq, value = text.partition("=")
    if not eq or not _KEY.fullmatch(key):
        raise EnvArgError(f"--env {text!r}: write KEY=VALUE, e.g. --env SGLANG_MM_FEATURE_CACHE_MB=2048")
    return key, value


def read_env_file(path: str) -> tuple[dict[str, str], list[Finding]]:
    """A dotenv-style file: ``KEY=VALUE`` lines, optional ``export``, ``#`` comments, quoted values.

    A line that is none of these is a finding located at it; the file's other lines still count.
    """
    raw, problem = read_bytes(path)
    text = None
    if problem is None and raw is not None:
        text, problem = decode(path, raw)
    if problem is not None or text is None:
        return {}, [problem] if problem else []
    values: dict[str, str] = {}
    findings: list[Finding] = []
    for number, line in enumerate(text.splitlines(), 1):
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        body = stripped.removeprefix("export ").lstrip()
        key, eq, value = body.partition("=")
        key = key.strip()
        if not eq or not _KEY.fullmatch(key):
            findings.append(
                Finding(
                    Severity.error,
                    "env-file-syntax",
                    f"not a KEY=VALUE line: {stripped[:60]!r}; write e.g. SGLANG_MM_FEATURE_CACHE_MB=2048",
                    f"{path}:{number}:{len(line) - len(line.lstrip()) + 1}",
                )
            )
            continue
        value = value.strip()
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
            value = value[1:-1]
        elif " #" in value:
            value = value.split(" #", 1)[0].rstrip()
        values[key] = value
    return values, findings


def assemble(
    process: Mapping[str, str] | None, env_files: list[str], env_args: list[str]
) -> tuple[dict[str, str], list[Finding]]:
    """The environment to check: the process's (unless None), then ``--env-file`` files, then ``--env``.

    Raises:
        EnvArgError: an ``--env`` argument is not ``KEY=VALUE``.
    """
    environ = dict(process or {})
    findings: list[Finding] = []
    for path in env_files:
        values, found = read_env_file(path)
        environ.update(values)
        findings += found
    for text in env_args:
        key, value = parse_env_arg(text)
        environ[key] = value
    return environ, findings


def env_findings(environ: Mapping[str, str]) -> list[Finding]:
    """What SGLang will silently do with the pool variables in ``environ`` (the budget aside)."""
    findings: list[Finding] = []

    def add(severity: Severity, code: str, message: str) -> None:
        findings.append(Finding(severity, code, message, ENV_LOCATION))

    for name in _TWINNED:
        legacy = "SGL_" + name.removeprefix("SGLANG_")
        if legacy in environ and name in environ and environ[legacy] != environ[name]:
            add(
                Severity.warning,
                "env-legacy-overrides",
                f"{legacy}={environ[legacy]} overrides {name}={environ[name]} (SGLang copies SGL_ "
                f"variables over SGLANG_ ones); unset {legacy}",
            )
    found = sg.env_name(sg.ENV_RECYCLE, environ)
    if found is not None:
        variable, raw = found
        interval = sg.parse_env_float(raw)
        if interval is None:
            add(
                Severity.warning,
                "env-recycle-invalid",
                f"{variable}={raw!r} is not a number to Python's float(): SGLang only warns and uses "
                f"{sg.DEFAULT_RECYCLE_SEC} s; set a positive number of seconds, e.g. 0.05",
            )
        elif math.isnan(interval):
            add(
                Severity.error,
                "env-recycle-nan",
                f"{variable}={raw}: NaN passes SGLang's check, and the pool recycler then spins without "
                "pausing, taking a CPU core; set a positive number of seconds, e.g. 0.05",
            )
        elif interval <= 0:
            add(
                Severity.error,
                "env-recycle-not-positive",
                f"{variable}={raw}: every pool fails with '{sg.MSG_RECYCLE_NOT_POSITIVE}'; "
                "set a positive number of seconds, e.g. 0.05",
            )
        elif interval > sg.MAX_WAIT_SEC:
            add(
                Severity.error,
                "env-recycle-too-large",
                f"{variable}={raw}: the recycler thread dies on its first wait (OverflowError), so pool "
                "space is never given back and every feature soon takes the CPU path; set e.g. 0.05",
            )
    found = sg.env_name(sg.ENV_LEGACY_TRANSPORT, environ)
    if found is not None:
        variable, raw = found
        on = sg.parse_env_bool(raw)
        if on is None:
            add(
                Severity.warning,
                "env-legacy-transport-invalid",
                f'{variable}={raw!r} is not a boolean to SGLang (\'"{raw.lower()}" is not a valid boolean '
                "value'): it counts as set and false, so an unset --mm-feature-transport resolves to cpu; "
                "unset it and use --mm-feature-transport",
            )
        else:
            add(
                Severity.warning,
                "env-legacy-transport",
                f"{variable}={raw} is deprecated: SGLang says 'SGLANG_USE_CUDA_IPC_TRANSPORT is deprecated; "
                f"use --mm-feature-transport={'cuda_ipc' if on else 'cpu'} instead.'",
            )
    return findings


def legacy_transport(environ: Mapping[str, str]) -> tuple[bool, bool]:
    """``(is_set, value)`` of ``SGLANG_USE_CUDA_IPC_TRANSPORT`` as SGLang's resolution reads it."""
    found = sg.env_name(sg.ENV_LEGACY_TRANSPORT, environ)
    if found is None:
        return False, False
    return True, bool(sg.parse_env_bool(found[1]))


def budget_is_set(environ: Mapping[str, str]) -> bool:
    """SGLang's ``SGLANG_MM_FEATURE_CACHE_MB.is_set()``: the name is present, whatever its value."""
    return sg.env_name(sg.ENV_BUDGET, environ) is not None


def vlm_cache_retention(environ: Mapping[str, str]) -> bool:
    """Whether ``SGLANG_VLM_CACHE_SIZE_MB`` keeps a cache (an unparsable value means the default 100)."""
    found = sg.env_name(sg.ENV_VLM_CACHE, environ)
    if found is None:
        return False
    value = sg.parse_env_int(found[1])
    return (sg.DEFAULT_VLM_CACHE_MB if value is None else value) > 0


def expandable_segments(environ: Mapping[str, str]) -> bool:
    """Whether PyTorch's allocator uses expandable segments (then IPC needs ``pidfd_getfd``)."""
    return sg.expandable_segments_enabled(environ.get(sg.ENV_ALLOC_CONF))


def budget_override() -> Budget:
    """The budget after the Qwen3-VL override sets ``SGLANG_MM_FEATURE_CACHE_MB=3072``."""
    return Budget(
        bytes=sg.QWEN3_VL_BUDGET_MB * sg.MiB, source="env", variable=sg.ENV_BUDGET, raw=str(sg.QWEN3_VL_BUDGET_MB)
    )
