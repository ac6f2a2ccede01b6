"""``mmpool check``: one launch command and its environment, read and planned as the engine would."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from mmpool_cli.core.findings import Finding
from mmpool_cli.core.reports import Report
from mmpool_cli.engines import DEFAULT, engine


def check(
    argv: list[str],
    environ: Mapping[str, str],
    assumptions: Any,
    *,
    env_file_findings: list[Finding] | None = None,
    strict: bool = False,
    sglang_version: str,
    sglang_version_chosen: str,
    engine_name: str = DEFAULT,
) -> Report:
    """The report on ``argv``: the launch command as one input, the environment's file findings first.

    ``assumptions`` are the engine's (what cannot be known offline); never raises for bad input.
    """
    result = engine(engine_name).read_launch(argv, environ, assumptions)
    if env_file_findings:
        result = replace(result, findings=env_file_findings + result.findings)
    return Report(
        command="check",
        results=[result],
        strict=strict,
        sglang_version=sglang_version,
        sglang_version_chosen=sglang_version_chosen,
        engine=engine_name,
    )
