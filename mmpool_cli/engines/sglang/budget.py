"""The budget's findings: where SGLang takes it from, and whether the chosen release accepts it.

Pure core: no I/O, no typer, rich or torch.
"""

from __future__ import annotations

from mmpool_cli.core.bounds import LARGEST_GPU_HBM_BYTES, largest_gpu
from mmpool_cli.core.excerpt import excerpt, shorten
from mmpool_cli.core.findings import Finding, Severity
from mmpool_cli.core.units import MAX_BYTES, MiB, format_exact, format_size, parse_size
from mmpool_cli.engines.sglang import eras, versions
from mmpool_cli.engines.sglang import rules as sg
from mmpool_cli.engines.sglang.eras import Add
from mmpool_cli.engines.sglang.models import Budget
from mmpool_cli.engines.sglang.versions import Release
from mmpool_cli.errors import SizeError


def budget_findings(budget: Budget, sglang_version: str = versions.NEWEST) -> list[Finding]:
    """The findings about where the budget comes from and whether SGLang accepts it, without a plan.

    For a launch that creates no pool, where ``make_plan`` is not called.
    """
    findings: list[Finding] = []

    def add(severity: Severity, code: str, message: str, subject: str | None) -> None:
        findings.append(Finding(severity, code, message, subject=subject))

    rel = versions.release(sglang_version)
    budget = eras.release_budget(budget, rel)
    mb = sg.budget_mb(budget.bytes)
    smallest = eras.smallest(rel, 1, "cuda_ipc", 1, sg.DEFAULT_VMM_GRANULARITY)
    check_budget(budget, mb, budget.bytes - mb * MiB, smallest, rel, add)
    return findings


def check_budget(budget: Budget, mb: int, floor_loss: int, smallest: int, rel: Release, add: Add) -> None:
    # A budget SGLang reads from the environment (or defaults) is the environment's finding.
    subject = "env" if budget.source in ("env", "default") else "budget"
    if budget.source == "default":
        add(Severity.info, "budget-default", f"{sg.ENV_BUDGET} is not set: SGLang uses its default {mb} MiB", "env")
    elif budget.source == "env":
        if abs(budget.bytes) > MAX_BYTES or (budget.invalid and sg.parse_env_int(budget.raw or "") is not None):
            add(
                Severity.error,
                "env-budget-too-large",
                f"{budget.variable}={excerpt(budget.raw or '')} is read by SGLang's int(), but that many MiB "
                "are beyond the 64-bit sizes torch allocates: creating the pool fails at start-up; "
                "set a whole number of MiB, e.g. 4096",
                "env",
            )
        elif budget.invalid:
            add(Severity.error, "env-budget-invalid", invalid_env_message(budget, rel), "env")
        else:
            read = f"budget read from {budget.variable}={shorten(budget.raw or '')}"
            add(Severity.info, "budget-from-env", read, "env")
        if budget.shadowed is not None and budget.shadowed[1] != budget.raw:
            name, raw = budget.shadowed
            add(
                Severity.warning,
                "env-legacy-overrides",
                f"{budget.variable}={shorten(budget.raw or '')} overrides {name}={shorten(raw)} (SGLang copies SGL_ "
                f"variables over SGLANG_ ones); unset {budget.variable}",
                "env",
            )
    if mb <= 0 and rel.split != "exact":
        # Before 0.5.16 nothing checks the budget: 0.5.11-0.5.15 still give each worker the
        # floor, 0.5.10 makes an empty pool (a negative budget fails in torch.empty, make_plan).
        if mb == 0 or rel.split == "floor":
            got = f"{format_size(rel.floor_bytes)} per worker" if rel.split == "floor" else "an empty pool"
            add(
                Severity.warning,
                "budget-not-positive",
                f"{sg.ENV_BUDGET}={mb}: SGLang {rel.version} does not refuse it and makes {got}; "
                f"use {rel.default_budget_mb} (its default) or another positive size",
                subject,
            )
    elif mb <= 0:
        if budget.bytes > 0:
            add(
                Severity.error,
                "budget-floors-to-zero",
                f"a budget of {format_size(budget.bytes)} is less than 1 MiB, and SGLang takes it "
                f"in whole MiB: 0 fails with '{sg.MSG_TOTAL_NOT_POSITIVE}'; the smallest valid "
                f"budget here is {smallest}MiB ({sg.ENV_BUDGET}={smallest})",
                subject,
            )
        else:
            add(
                Severity.error,
                "budget-not-positive",
                f"{sg.ENV_BUDGET}={mb}: SGLang fails at start-up with "
                f"'{sg.MSG_TOTAL_NOT_POSITIVE}'; use {smallest} or more",
                subject,
            )
    elif floor_loss:
        add(
            Severity.warning,
            "budget-not-whole-mib",
            f"{format_size(budget.bytes)} is not a whole number of MiB: SGLang takes "
            f"{sg.ENV_BUDGET}={mb} and reserves {format_size(mb * MiB)}, "
            f"{floor_loss:,} bytes less",
            subject,
        )
    if mb * MiB > LARGEST_GPU_HBM_BYTES:
        add(
            Severity.error,
            "budget-exceeds-gpu",
            f"{sg.ENV_BUDGET}={mb} ({format_size(mb * MiB)}) is more than any GPU has ({largest_gpu()}), "
            "and every pool lives on the base GPU: SGLang's tokenizer workers would fail to allocate; "
            "set a budget that fits the base GPU",
            subject,
        )


def invalid_env_message(budget: Budget, rel: Release) -> str:
    fix = "a whole number of MiB, e.g. 1024"
    try:
        meant = parse_size(budget.raw or "")
    except SizeError:
        pass
    else:
        if meant >= MiB:
            fix = f"{meant // MiB} ({format_exact(meant)} in whole MiB)"
    raw = budget.raw or ""
    digits = raw.strip()
    digits = digits[1:] if digits[:1] in ("+", "-") else digits
    what = "is not an integer"
    if digits.isdigit() and digits.isascii():  # int() reads any length of digits but this one's
        what = f"has {len(digits):,} digits, more than Python's int() reads"
    return (
        f"{budget.variable}={excerpt(raw)} {what}: SGLang only warns and uses its "
        f"default {rel.default_budget_mb} MiB; set it to {fix}"
    )
