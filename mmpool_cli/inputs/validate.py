"""``mmpool validate``: every file and the environment, every finding, in one run.

A file is an mmpool config when its top-level mapping has one of the sections ``pool``,
``parallel``, ``gpu`` or ``workload``; any other mapping is read as an SGLang ``--config`` file
(``kind`` forces one or the other). The environment is one more input, reported once. Pure core:
no typer, rich or torch.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Literal

from mmpool_cli.core.models import FileResult, Finding, PlanRequest, Report, Severity
from mmpool_cli.core.plan import budget_findings, budget_from_env, make_plan
from mmpool_cli.inputs import config as cfgmod
from mmpool_cli.inputs.launch import Assumptions, resolve
from mmpool_cli.inputs.yamlsrc import STDIN, Source, load
from mmpool_cli.sglang import environment as envmod
from mmpool_cli.sglang.args import config_tokens, read

Kind = Literal["auto", "mmpool", "sglang"]
# Findings about the environment's budget: reported once, on the environment, not on every plan.
_ENV_CODES = {"budget-default", "budget-from-env", "env-budget-invalid", "env-legacy-overrides", "budget-not-positive"}


def environment_result(environ: Mapping[str, str], file_findings: list[Finding]) -> FileResult:
    """The environment as one input: env-file problems, and what SGLang will silently do with it."""
    findings = list(file_findings)
    findings += envmod.env_findings(environ)
    for f in budget_findings(budget_from_env(environ)):
        findings.append(Finding(f.severity, f.code, f.message, envmod.ENV_LOCATION))
    return FileResult(path=envmod.ENV_LOCATION, kind="environment", findings=findings)


def validate_file(name: str, environ: Mapping[str, str], kind: Kind = "auto", stdin: bytes | None = None) -> FileResult:
    """Read one file and check it as an mmpool config or an SGLang ``--config`` file."""
    src = load(name, stdin)
    if not isinstance(src.data, dict):
        return FileResult(path=name, kind="unknown", findings=src.findings)
    if kind == "mmpool" or (kind == "auto" and cfgmod.is_mmpool_config(src.data)):
        return _mmpool(src, environ)
    return _sglang(src, environ)


def mmpool_config(name: str, environ: Mapping[str, str]) -> tuple[FileResult, PlanRequest | None]:
    """Check one mmpool config and give the plan request it makes (None when it has errors or no pool)."""
    return _mmpool_with_request(load(name), environ)


def _mmpool(src: Source, environ: Mapping[str, str]) -> FileResult:
    return _mmpool_with_request(src, environ)[0]


def _mmpool_with_request(src: Source, environ: Mapping[str, str]) -> tuple[FileResult, PlanRequest | None]:
    findings = list(src.findings)
    cfg, errors = cfgmod.parse(src)
    if cfg is None:
        return FileResult(path=src.name, kind="mmpool", findings=findings + errors), None
    plan = request = None
    if cfg.pool.transport == "cpu":
        findings.append(
            Finding(
                Severity.info,
                "no-pool",
                "pool.transport is cpu: no feature pool exists and nothing is reserved for one",
                src.where(("pool", "transport")),
            )
        )
    else:
        request = cfgmod.request(cfg, environ)
        plan = make_plan(request)
        for f in plan.findings:
            if cfg.pool.size is None and f.code in _ENV_CODES:
                continue
            path = cfgmod.PLAN_CODE_PATHS.get(f.code)
            location = src.where(path) if path else src.name
            findings.append(Finding(f.severity, f.code, f.message, location))
    findings += cfgmod.extra_findings(src, cfg, plan, environ)
    result = FileResult(path=src.name, kind="mmpool", findings=findings, plan=plan, transport=cfg.pool.transport)
    return result, None if result.fails(strict=False) else request


def _sglang(src: Source, environ: Mapping[str, str]) -> FileResult:
    findings = list(src.findings)
    suffix = os.path.splitext(src.name)[1]
    if src.name != STDIN and suffix.lower() not in (".yaml", ".yml"):
        findings.append(
            Finding(
                Severity.error,
                "config-not-yaml",
                f"SGLang fails with 'Config file must be YAML format, got: {suffix}'; name it .yaml or .yml "
                "(or, if this is an mmpool config, give it a pool, parallel, gpu or workload section)",
                src.name,
            )
        )
    tokens, found = config_tokens(src)
    findings += found
    reading = read(tokens)
    findings += reading.findings
    resolution = resolve(reading, environ, Assumptions())
    env_keys = {(f.code, f.message) for f in environment_result(environ, []).findings}
    findings += [
        f if f.location else Finding(f.severity, f.code, f.message, src.name)
        for f in resolution.findings
        if (f.code, f.message) not in env_keys
    ]
    return FileResult(
        path=src.name, kind="sglang", findings=findings, plan=resolution.plan, transport=resolution.transport
    )


def validate(
    paths: list[str],
    environ: Mapping[str, str],
    *,
    kind: Kind = "auto",
    stdin: bytes | None = None,
    env_file_findings: list[Finding] | None = None,
    strict: bool = False,
) -> Report:
    """Validate every path (``-`` is ``stdin``) and the environment; never raises for bad input."""
    results = [environment_result(environ, env_file_findings or [])]
    results += [validate_file(p, environ, kind, stdin) for p in paths]
    return Report(command="validate", results=results, strict=strict)
