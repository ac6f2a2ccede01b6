"""SGLang's inputs for ``mmpool validate``: the environment, mmpool configs and SGLang ``--config`` files.

A file is an mmpool config when its top-level mapping has one of the sections ``pool``,
``parallel``, ``gpu`` or ``workload``; any other mapping is read as an SGLang ``--config`` file
(``kind`` forces one or the other). No typer, rich or torch.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import replace
from typing import Literal

from mmpool_cli.core.findings import Finding, Severity
from mmpool_cli.core.reports import FileResult
from mmpool_cli.engines.sglang import env_vars as envmod
from mmpool_cli.engines.sglang import mmpool_config as cfgmod
from mmpool_cli.engines.sglang import versions
from mmpool_cli.engines.sglang.args import Reading, read
from mmpool_cli.engines.sglang.budget import budget_findings
from mmpool_cli.engines.sglang.config_findings import extra_findings
from mmpool_cli.engines.sglang.config_merge import config_tokens
from mmpool_cli.engines.sglang.env_vars import LaunchEnv
from mmpool_cli.engines.sglang.flags import table
from mmpool_cli.engines.sglang.models import PlanRequest
from mmpool_cli.engines.sglang.plan import make_plan
from mmpool_cli.engines.sglang.resolution import Assumptions, resolve
from mmpool_cli.inputs.filebytes import STDIN
from mmpool_cli.inputs.yaml11 import CODE as YAML11
from mmpool_cli.inputs.yamlsrc import Source, load

Kind = Literal["auto", "mmpool", "sglang"]


def environment_result(
    environ: Mapping[str, str], launch: LaunchEnv, file_findings: list[Finding], sglang_version: str = versions.NEWEST
) -> FileResult:
    """The environment as one input: env-file problems, and what SGLang will silently do with it."""
    findings = list(file_findings)
    findings += envmod.env_findings(environ)
    place = envmod.where(environ, launch.budget.variable)
    findings += [f.at(place) for f in budget_findings(launch.budget, sglang_version)]
    return FileResult(path=envmod.ENV_LOCATION, kind="environment", findings=findings)


def validate_file(
    name: str,
    launch: LaunchEnv,
    kind: Kind = "auto",
    stdin: bytes | Finding | None = None,
    sglang_version: str = versions.NEWEST,
) -> FileResult:
    """Read one file and check it as an mmpool config or an SGLang ``--config`` file of ``sglang_version``."""
    src = load(name, stdin)
    if not isinstance(src.data, dict):
        return FileResult(path=name, kind="unknown", findings=src.findings)
    if kind == "mmpool" or (kind == "auto" and cfgmod.is_mmpool_config(src.data)):
        return _mmpool(src, launch, sglang_version)[0]
    return _sglang(src, launch, sglang_version)


def mmpool_config(name: str, environ: Mapping[str, str]) -> tuple[FileResult, PlanRequest | None]:
    """Check one mmpool config and give the plan request it makes (None when it has errors or no pool)."""
    return _mmpool(load(name), envmod.read_launch_env(environ))


def _mmpool(
    src: Source, launch: LaunchEnv, sglang_version: str = versions.NEWEST
) -> tuple[FileResult, PlanRequest | None]:
    # mmpool's own config: a YAML 1.1 reading (010 as 8) is refused, not guessed at
    findings = [
        replace(f, severity=Severity.error, message=f"{f.message} (mmpool does not guess in its own config)")
        if f.code == YAML11
        else f
        for f in src.findings
    ]
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
        request = replace(cfgmod.request(cfg, launch), sglang_version=sglang_version)
        plan = make_plan(request)
        # the environment's own findings are reported once, on the environment
        for f in plan.findings:
            if f.subject != "env":
                path = cfgmod.subject_path(f.subject)
                findings.append(f.at(src.where(path) if path else src.name))
    findings += extra_findings(src, cfg, plan, launch)
    result = FileResult(path=src.name, kind="mmpool", findings=findings, plan=plan, transport=cfg.pool.transport)
    return result, None if result.fails(strict=False) else request


def _sglang(src: Source, launch: LaunchEnv, sglang_version: str = versions.NEWEST) -> FileResult:
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
    flags = table(versions.release(sglang_version).version)
    tokens, found = config_tokens(src, flags)
    findings += found
    reading = read(tokens, Reading(flags=flags))
    findings += reading.findings
    resolution = resolve(reading, launch, Assumptions(sglang_version=sglang_version))
    # the environment's own findings are reported once, on the environment
    findings += [f.at(src.name) for f in resolution.findings if f.subject != "env"]
    return FileResult(
        path=src.name, kind="sglang", findings=findings, plan=resolution.plan, transport=resolution.transport
    )
