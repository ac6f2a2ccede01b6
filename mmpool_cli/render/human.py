"""Renderers: turn result models into rich renderables or JSON text. They never print or exit."""

from __future__ import annotations

import shlex

from rich.console import Console, ConsoleOptions, Group, RenderableType, RenderResult
from rich.segment import Segment
from rich.text import Text

from mmpool_cli.core.findings import Finding, Severity
from mmpool_cli.core.reports import FileResult, Report, Settings
from mmpool_cli.core.units import format_binary, format_size, is_whole_binary
from mmpool_cli.engines.sglang.models import Plan
from mmpool_cli.engines.sglang.rules import ENV_BUDGET
from mmpool_cli.engines.sglang.versions import NEWEST
from mmpool_cli.probe.probe_report import ProbeReport
from mmpool_cli.render.layout import Block, Grid, Paragraph, Rows, Span
from mmpool_cli.render.text import summary_line, version_note
from mmpool_cli.workload.kv import KvCost

SEVERITY_STYLE = {Severity.error: "bold red", Severity.warning: "yellow", Severity.info: "cyan"}
SEVERITY_MARK = {Severity.error: "error", Severity.warning: "warning", Severity.info: "info"}


def _size(n: int | None) -> str:
    return "n/a" if n is None else format_size(n)


def launch_line(settings: Settings) -> str:
    """``sglang serve --model-path ...`` with the flags, quoted for a shell; MODEL where the model is unknown."""
    path = "MODEL" if settings.model_path is None else shlex.quote(settings.model_path)
    return " ".join(["sglang serve --model-path", path, *(shlex.quote(a) for a in settings.args)])


class Laid:
    """A block of ``render.layout`` as a rich renderable: laid out at the console's width, never cut."""

    def __init__(self, block: Block) -> None:
        self.block = block

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        for line in self.block.lines(options.max_width):
            for text, style in line:
                yield Segment(text, console.get_style(style) if style else None)
            yield Segment.line()


def paragraph(*spans: str | tuple[str, str]) -> Laid:
    """Text wrapped at whitespace and never inside a number; a span is text or (text, style)."""
    return Laid(Paragraph([(s, None) if isinstance(s, str) else s for s in spans]))


def _kv_table(title: str, rows: list[tuple[str, str]]) -> Laid:
    return Laid(Rows(title or None, [(key, [(value, None)]) for key, value in rows]))


def findings_table(findings: list[Finding], title: str | None = None) -> Laid:
    """Findings as a table: severity, code, location (when any) and message."""
    located = any(f.location for f in findings)
    headers = ["severity", "code", *(["where"] if located else []), "message"]
    rows: list[list[list[Span]]] = []
    for f in findings:
        row: list[list[Span]] = [[(SEVERITY_MARK[f.severity], SEVERITY_STYLE[f.severity])], [(f.code, None)]]
        if located:
            row.append([(f.location or "", None)])
        rows.append([*row, [(f.message, None)]])
    return Laid(Grid(title, headers, rows))


def plan_human(plan: Plan) -> RenderableType:
    """The plan for people: budget, split, capacity, HBM, findings and the settings to copy."""
    parts: list[RenderableType] = []
    verdict = ("OK", "bold green") if plan.status == "ok" else ("FAIL", "bold red")
    release = version_note(plan.sglang_version, plan.sglang_version_chosen)
    parts.append(paragraph("mmpool plan: ", verdict, f"  ({release}, {plan.transport})"))

    source = {
        "flag": "from --size",
        "config": "from the config file",
        "env": f"from {plan.budget_env_variable}={plan.budget_env_value}",
        "default": "SGLang's default",
    }[plan.budget_source]
    parts.append(
        _kv_table(
            "Budget",
            [
                ("requested", f"{_size(plan.budget_bytes)}  [{source}]"),
                (ENV_BUDGET, str(plan.sglang_mm_feature_cache_mb)),
                ("SGLang reserves", _size(plan.effective_budget_bytes)),
                ("lost to whole MiB", _size(plan.floor_loss_bytes)),
            ],
        )
    )
    layout = f"TP {plan.tp_size}, DP {plan.dp_size}"
    if plan.attn_dp_size != 1 or plan.enable_dp_attention:
        layout += f", attention DP {plan.attn_dp_size if plan.attn_dp_size != 1 else plan.dp_size}"
    rows = [
        ("tokenizer workers", str(plan.workers)),
        ("consumers per feature", f"{plan.consumers if plan.consumers is not None else 'n/a'}  [{layout}]"),
        ("share", _size(plan.per_worker_bytes)),
        ("unused remainder", "n/a" if plan.unused_bytes is None else _size(plan.unused_bytes) + " (whole split)"),
    ]
    if plan.transport == "cuda_ipc":
        rows.append(("control header", _size(plan.header_bytes)))
    else:
        rows.append(("VMM granularity", _size(plan.vmm_granularity_bytes)))
        rows.append(("allocation", _size(plan.allocation_bytes_per_worker)))
        rows.append(("control per lease", _size(plan.lease_control_bytes)))
    rows.append(("usable", _size(plan.usable_bytes_per_worker)))
    if plan.max_inflight_slices:
        rows.append(("in-flight slots", str(plan.max_inflight_slices)))
    parts.append(_kv_table("Per worker pool", rows))

    if plan.features:
        named = any(f.item for f in plan.features)
        columns = (["item"] if named else []) + ["feature", "slice", "fit per worker", "fit per node"]
        cells: list[list[list[Span]]] = []
        for f in plan.features:
            fit = "n/a" if f.fit_per_worker is None else f"{f.fit_per_worker:,}"
            if f.limited_by == "slots":
                fit += " (slot cap)"
            node = "n/a" if f.fit_per_node is None else f"{f.fit_per_node:,}"
            row = ([f.item or "--feature-size"] if named else []) + [_size(f.bytes), _size(f.slice_bytes), fit, node]
            cells.append([[(v, None)] for v in row])
        fits = {i for i, name in enumerate(columns) if name.startswith("fit")}
        parts.append(Laid(Grid("Features in one fresh worker pool", columns, cells, right=fits)))

    if plan.hbm is not None:
        h = plan.hbm
        hbm_rows = [
            (
                "pools",
                f"{h.processes} × {_size(h.pool_reserved_bytes_per_worker)} = "
                f"{_size(h.pool_reserved_bytes)}  [{h.allocator} allocator]",
            ),
            (
                "CUDA contexts",
                f"{h.processes} × {_size(h.context_bytes_per_process)} = {_size(h.context_bytes)}  [estimate]",
            ),
            ("total", _size(h.total_bytes)),
        ]
        if h.positional_pool_bytes:
            hbm_rows += [
                (
                    "positional-embeds pools",
                    f"{h.processes} × {_size(h.positional_pool_bytes_per_worker)} = "
                    f"{_size(h.positional_pool_bytes)}  [cuda_ipc, on the first CUDA embedding override]",
                ),
                ("at most", f"{_size(h.max_total_bytes)}  [with the positional-embeds pools]"),
            ]
        parts.append(_kv_table(f"Predicted HBM on GPU {h.base_gpu_id}", hbm_rows))

    if plan.kv_cost is not None:
        parts.append(_kv_cost_table(plan.kv_cost))

    if plan.findings:
        parts.append(findings_table(plan.findings, "Findings"))

    if plan.settings is not None:
        parts.append(Text("Settings to copy", style="bold"))
        lines = [f"export {k}={shlex.quote(v)}" for k, v in plan.settings.env.items()]
        lines.append(launch_line(plan.settings))
        # never wrapped: a pasted line break would run the rest of the command as a command of its own
        parts += [Text(line, no_wrap=True, overflow="ignore") for line in lines]
    return Group(*parts)


STAGE_STYLE = {"pass": "bold green", "fail": "bold red", "skip": "dim"}


def _figure(key: str, value: object) -> str:
    if "_bytes" in key and isinstance(value, int) and not isinstance(value, bool):
        return format_size(value)
    if "_bytes" in key and isinstance(value, list):
        return ", ".join(format_size(v) for v in value)
    if key.endswith("_seconds") and isinstance(value, float):
        return f"{value * 1e6:.0f} µs" if value < 0.001 else f"{value:.3f} s"
    if isinstance(value, dict):
        return "; ".join(f"{k}={_figure(k, v)}" for k, v in value.items())
    return str(value)


def probe_human(report: ProbeReport) -> RenderableType:
    """The probe for people: the GPUs, then each stage with its figures and findings."""
    verdict = ("OK", "bold green") if report.status == "ok" else ("FAIL", "bold red")
    plan = report.plan
    release = (
        version_note(NEWEST, "newest")
        if plan is None
        else version_note(plan.sglang_version, plan.sglang_version_chosen)
    )
    parts: list[RenderableType] = [paragraph("mmpool probe: ", verdict, f"  ({report.seconds:.1f} s, {release})")]
    for f in report.inputs:  # one line each, as a compiler prints them (a table would cut long paths)
        where = f"{f.location}: " if f.location else ""
        line = Text.assemble(f"  {where}", (f.severity.value, SEVERITY_STYLE[f.severity]), f" [{f.code}] {f.message}")
        line.no_wrap, line.overflow = True, "ignore"
        parts.append(line)
    if not report.gpus:
        return Group(*parts)
    rows: list[list[list[Span]]] = []
    for g in report.gpus:
        cuda = "-" if g.cuda_index is None else str(g.cuda_index)
        base = " (base)" if report.base_gpu is not None and g.nvml_index == report.base_gpu.nvml_index else ""
        free, total = (("" if is_whole_binary(n) else "≈") + format_binary(n) for n in (g.free_bytes, g.total_bytes))
        rows.append([[(v, None)] for v in (cuda + base, str(g.nvml_index), g.name, free, total)])
    parts.append(Laid(Grid("GPUs (NVML)", ["cuda", "nvml", "name", "free", "total"], rows)))
    for stage in report.stages:
        seconds = "" if stage.seconds is None else f"  {stage.seconds:.2f} s"
        parts.append(
            paragraph((f"{stage.title}: ", "bold"), (stage.status.upper(), STAGE_STYLE[stage.status]), seconds)
        )
        figures = [(k, _figure(k, v)) for k, v in stage.figures.items() if v is not None]
        if figures:
            parts.append(_kv_table("", figures))
        if stage.findings:
            parts.append(findings_table(stage.findings))
    return Group(*parts)


def _plan_line(plan: Plan) -> str:
    if hasattr(plan, "summary_line"):  # another engine's plan says itself what it is
        return str(plan.summary_line())
    usable = _size(plan.usable_bytes_per_worker)
    line = (
        f"plan: {plan.transport}, {plan.sglang_mm_feature_cache_mb} MiB over {plan.workers} worker(s), "
        f"{_size(plan.per_worker_bytes)} each, {usable} usable"
    )
    if plan.hbm is not None:
        line += f"; about {_size(plan.hbm.total_bytes)} on GPU {plan.hbm.base_gpu_id} with contexts"
        if plan.hbm.positional_pool_bytes:
            line += f", at most {_size(plan.hbm.max_total_bytes)} with the positional-embeds pools"
    return line


def result_human(result: FileResult, strict: bool, verbose: bool) -> RenderableType:
    """One input: its verdict, one line per finding (infos only when ``verbose``), a one-line plan.

    Findings read like a compiler's: ``file:line:col: error [code] message``.
    """
    fails = result.fails(strict)
    verdict = Text("INVALID", style="bold red") if fails else Text("valid", style="green")
    parts: list[RenderableType] = [Text.assemble(Text(result.path, style="bold"), f"  [{result.kind}]  ", verdict)]
    for f in result.findings:
        if verbose or f.severity is not Severity.info:
            where = f"{f.location}: " if f.location else ""
            parts.append(
                Text.assemble(
                    f"  {where}",
                    Text(SEVERITY_MARK[f.severity], style=SEVERITY_STYLE[f.severity]),
                    f" [{f.code}] {f.message}",
                )
            )
    if isinstance(result.plan, Plan) and result.plan.status == "ok":
        parts.append(Text("  " + _plan_line(result.plan), style="dim"))
    elif result.plan is None and not verbose and not fails:
        # that no pool exists is the answer a check gives, not a detail behind -v
        for f in result.findings:
            if f.code in ("no-pool", "launch-help"):
                parts.append(Text(f"  plan: no pool: {f.message}", style="dim"))
    return Group(*parts)


def report_human(report: Report, verbose: bool = False) -> RenderableType:
    """Every input, then the summary line; valid inputs without findings take one line each."""
    parts: list[RenderableType] = []
    for result in report.results:
        parts.append(result_human(result, report.strict, verbose))
    verdict = Text("OK", style="bold green") if report.ok else Text("FAIL", style="bold red")
    release = version_note(report.sglang_version, report.sglang_version_chosen, report.engine)
    parts.append(Text.assemble(f"mmpool {report.command}: ", verdict, f"  {summary_line(report)}; {release}"))
    return Group(*parts)


def _kv_cost_table(kv: KvCost) -> Laid:
    if kv.attention == "mla":
        shape = f"MLA, {kv.layers} layers, kv_lora_rank {kv.kv_lora_rank} + rope {kv.qk_rope_head_dim}"
    else:
        shape = (
            f"{kv.layers} layers, {kv.kv_heads_per_rank} of {kv.kv_heads} KV heads per rank, "
            f"head dim {kv.head_dim} + {kv.v_head_dim}"
        )
    tokens = f"{kv.tokens_min:,}" if kv.tokens_min == kv.tokens_max else f"{kv.tokens_min:,} to {kv.tokens_max:,}"
    rows = [
        ("per token per rank", f"{kv.cell_bytes:,} B  [{shape}, {kv.kv_cache_dtype} = {kv.dtype_bytes} B]"),
        (
            "reservation",
            f"{_size(kv.reserved_bytes)}  [{kv.feature_budget_mb} {'-' if kv.vlm_cache_mb < 0 else '+'} "
            f"{abs(kv.vlm_cache_mb)} MiB on every rank]",
        ),
        ("KV tokens given up", tokens + ("  (approximate)" if kv.approximate else "")),
    ]
    if kv.landing_tokens_max is not None:
        rows.append(("if the pool lands in sizing", f"up to {kv.landing_tokens_max:,} tokens"))
    return _kv_table("KV-cache cost (max_total_num_tokens)", rows)
