"""``mmpool probe``: the planned pools measured on the GPU, as one report for every outcome.

No typer, rich or torch here: the probe's children import torch (``mmpool_cli.probe``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from mmpool_cli.core.findings import Finding, Severity
from mmpool_cli.core.reports import FileResult
from mmpool_cli.engines import DEFAULT, engine
from mmpool_cli.probe.devices import ProbeUnavailable
from mmpool_cli.probe.probe_report import ProbeReport
from mmpool_cli.probe.runner import ProbeRequest, run_probe


def probe(request: ProbeRequest, note: Callable[[str], None] | None = None) -> ProbeReport:
    """Run every stage of the probe on this machine.

    Raises:
        ProbeUnavailable: this machine cannot run it; ``unavailable_report`` is the report to print.
    """
    return run_probe(request, note)


def unavailable_report(request: ProbeRequest, error: ProbeUnavailable, engine_name: str = DEFAULT) -> ProbeReport:
    """The report of a probe that cannot run here: the plan and why (``probe-unavailable``)."""
    unavailable = [Finding(Severity.error, "probe-unavailable", str(error))]
    return ProbeReport(engine(engine_name).plan(request.plan), [], None, [], 0.0, unavailable, unavailable=True)


def invalid_input_report(result: FileResult) -> ProbeReport:
    """The report of a probe whose config file has errors: its findings as the inputs, no stage run."""
    plan: Any = result.plan  # the engine's plan of the file, or None
    return ProbeReport(plan, [], None, [], 0.0, list(result.findings))
