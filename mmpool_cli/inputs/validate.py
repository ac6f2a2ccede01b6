"""``mmpool validate``: every file and the environment, every finding, in one run.

A file is an mmpool config when its top-level mapping has one of the sections ``pool``,
``parallel``, ``gpu`` or ``workload``; any other mapping is read as an SGLang ``--config`` file
(``kind`` forces one or the other). The environment is one more input, reported once. Pure core:
no typer, rich or torch.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import replace
from typing import Literal

from mmpool_cli.core.budget import budget_findings
from mmpool_cli.core.models import FileResult, Finding, PlanRequest, Report, Severity
from mmpool_cli.core.plan import make_plan
from mmpool_cli.inputs import config as cfgmod
from mmpool_cli.inputs.yamlsrc import STDIN, Source, load
from mmpool_cli.sglang import environment as envmod
from mmpool_cli.sglang import versions
from mmpool_cli.sglang.args import Reading, read
from mmpool_cli.sglang.config_merge import config_tokens
from mmpool_cli.sglang.environment import LaunchEnv
from mmpool_cli.sglang.flags import table
from mmpool_cli.sglang.resolution import Assumptions, resolve

Kind = Literal["auto", "mmpool", "sglang"]
# The files a directory argument (and the pre-commit hook) checks: names that start with mmpool or
# sglang and end in .yaml, .yml or .json, so that other YAML in a repository is left alone.
CONFIG_NAME = re.compile(r"(mmpool|sglang)[^/]*\.(ya?ml|json)")
MAX_DIRECTORY_FILES = 10_000


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
        request = replace(cfgmod.request(cfg, launch), sglang_version=sglang_version)
        plan = make_plan(request)
        # the environment's own findings are reported once, on the environment
        for f in plan.findings:
            if f.subject != "env":
                path = cfgmod.SUBJECT_PATHS.get(f.subject or "")
                findings.append(f.at(src.where(path) if path else src.name))
    findings += cfgmod.extra_findings(src, cfg, plan, launch)
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


def expand(paths: list[str]) -> tuple[list[str], list[FileResult]]:
    """Files to validate: each path as given, each directory walked for ``CONFIG_NAME`` files.

    Hidden directories are skipped; a directory with no config files, or with more than
    ``MAX_DIRECTORY_FILES`` of them, is a finding rather than a silent pass or an endless walk.
    """
    files: list[str] = []
    problems: list[FileResult] = []
    for path in paths:
        if path == STDIN or not os.path.isdir(path):
            files.append(path)
            continue
        found: list[str] = []
        for top, dirs, names in os.walk(path):
            dirs[:] = sorted(d for d in dirs if not d.startswith("."))
            found += [os.path.join(top, n) for n in sorted(names) if CONFIG_NAME.fullmatch(n)]
            if len(found) > MAX_DIRECTORY_FILES:
                break
        if not found or len(found) > MAX_DIRECTORY_FILES:
            why = "no" if not found else f"more than {MAX_DIRECTORY_FILES:,}"
            finding = Finding(
                Severity.error,
                "directory-no-configs" if not found else "directory-too-many",
                f"{why} files named mmpool*.yaml/.yml/.json or sglang*.yaml/.yml/.json under {path}; "
                "name the files to check",
                path,
            )
            problems.append(FileResult(path=path, kind="unknown", findings=[finding]))
        else:
            files += found
    return files, problems


def validate(
    paths: list[str],
    environ: Mapping[str, str],
    *,
    kind: Kind = "auto",
    stdin: bytes | Finding | None = None,
    env_file_findings: list[Finding] | None = None,
    strict: bool = False,
    sglang_version: str = versions.NEWEST,
    sglang_version_chosen: str = "newest",
) -> Report:
    """Validate every path (``-`` is ``stdin``, a directory its config files) and the environment
    against one SGLang release.

    Never raises for bad input; an unknown ``sglang_version`` raises MmpoolError.
    """
    version = versions.release(sglang_version).version
    launch = envmod.read_launch_env(environ)
    files, problems = expand(paths)
    results = [environment_result(environ, launch, env_file_findings or [], version), *problems]
    results += [validate_file(p, launch, kind, stdin, version) for p in files]
    # every plan says how its release was chosen, as the report does
    results = [
        r if r.plan is None else replace(r, plan=replace(r.plan, sglang_version_chosen=sglang_version_chosen))
        for r in results
    ]
    return Report(
        command="validate",
        results=results,
        strict=strict,
        sglang_version=version,
        sglang_version_chosen=sglang_version_chosen,
    )
