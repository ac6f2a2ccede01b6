"""``mmpool tune``'s report: the split to set, today's launch beside it, the front, as plain text or JSON.

Plain text, every number whole (a table's columns as wide as their widest figure: nothing is cut).
Returns the output, never prints.
"""

from __future__ import annotations

import json
from fractions import Fraction

from mmpool_cli.core.units import format_size
from mmpool_cli.core.words import count
from mmpool_cli.tune.front import OBJECTIVES
from mmpool_cli.tune.split import Memory, Row, TuneReport, gain

FRONT_ROWS = 24  # the front's rows shown (the JSON holds every row); today's and the recommended always


def to_json(report: TuneReport) -> str:
    """The versioned JSON payload (docs/formats.md)."""
    return json.dumps(report.to_data(), indent=2) + "\n"


def verdict(report: TuneReport) -> str:
    """OK where today's launch is as good as the recommendation under the objective, else BETTER SPLIT."""
    return "OK" if report.status == "ok" else "BETTER SPLIT"


def _per_request(x: Fraction) -> str:
    hundredths = x.numerator * 100 // x.denominator
    return f"{hundredths // 100:,}.{hundredths % 100:02d}"


def _signed(n: int) -> str:
    return f"{n:+,}"


MEASURES = (
    "KV tokens",
    "batch",
    "fallback",
    "fallback bytes",
    "prefix served",
    "encoder tokens",
    "work/request",
    "assumes",
)


def _settings_columns(memories: tuple[Memory, ...]) -> list[tuple[str, str]]:
    """(title, memory name) of each memory's setting column: its name and unit, the KV cache's only where its
    unit is not the KV tokens the measures show; a title a measure has is told apart as the memory's size."""
    out = []
    for m in memories:
        if m.name == "kv" and m.unit == "tokens":
            continue
        name = "KV" if m.name == "kv" else m.name.replace("_", " ")  # a heading, not an identifier
        title = f"{name} {m.unit}"
        out.append((f"{name} size {m.unit}" if title in MEASURES else title, m.name))
    return out


def _cells(row: Row, names: list[str]) -> list[str]:
    m = row.measures
    mark = ("today" if row.today else "") + ("*" if row.recommended else "")
    return [
        mark,
        *(f"{row.values[n]:,}" for n in names),
        f"{m.kv_tokens:,}",
        f"{m.batch:,}",
        f"{m.fallback_items:,}",
        f"{m.fallback_bytes:,}",
        f"{m.prefix_served_tokens:,}",
        f"{m.encoder_tokens:,}",
        _per_request(m.work_per_request),
        ",".join(str(i + 1) for i in row.assumed) or "-",
    ]


def table(rows: list[Row], memories: tuple[Memory, ...]) -> list[str]:
    """The rows as a table: the mark left-aligned, every figure right-aligned to its column's widest."""
    columns = _settings_columns(memories)
    titles = ["", *(t for t, _ in columns), *MEASURES]
    cells = [titles, *(_cells(r, [n for _, n in columns]) for r in rows)]
    widths = [max(len(c[i]) for c in cells) for i in range(len(titles))]
    out = []
    for c in cells:
        parts = [c[0].ljust(widths[0])] + [v.rjust(w) for v, w in zip(c[1:], widths[1:], strict=True)]
        out.append("  ".join(parts).rstrip())
    return out


def tune_text(report: TuneReport) -> str:
    """The human report."""
    rec, today = report.recommended, report.today
    front = [r for r in report.rows if r.on_front]
    lines = [
        f"mmpool tune: {verdict(report)}  ({report.engine}, {report.source})",
        f"budget     {format_size(report.budget_bytes)} per rank  [{report.budget_origin}]",
        f"objective  {report.objective}: {OBJECTIVES[report.objective]}",
        f"rows       {count(len(report.rows), 'split')} scored, {len(front):,} on the front "
        "(no row better on every measure)",
        "",
        "Recommended split" + (" (today's launch)" if rec.today else ""),
        *(f"  {line}" for line in rec.settings),
    ]
    if today is not None and not rec.today:
        g = gain(today.measures, rec.measures)
        lines += [
            "",
            "What the change buys (recommended less today's)",
            f"  prefill tokens   {_signed(g['work_tokens'] - g['encoder_tokens'])}",
            f"  encoder tokens   {_signed(g['encoder_tokens'])}",
            f"  work/request     {_per_request(today.measures.work_per_request)} -> "
            f"{_per_request(rec.measures.work_per_request)}",
            f"  fallback items   {_signed(g['fallback_items'])}  ({_signed(g['fallback_bytes'])} B)",
            f"  KV tokens        {_signed(g['kv_tokens'])}  (batch {_signed(g['batch'])})",
        ]
    shown = front if len(front) <= FRONT_ROWS else _thin(front)
    shown = sorted(
        {id(r): r for r in [*shown, rec, *([today] if today is not None else [])]}.values(),
        key=lambda r: (-r.measures.kv_tokens, *(r.values[n] for _, n in _settings_columns(report.memories))),
    )
    lines += [
        "",
        f"The front, and today's launch ({len(shown):,} of {count(len(report.rows), 'row')}; * recommended; "
        "JSON: every row)",
        *(f"  {line}" for line in table(shown, report.memories)),
    ]
    m = rec.measures
    lines += [
        "",
        f"Of the traffic: {m.requests:,} requests with media, {m.prompt_tokens:,} prompt tokens; work = prefill "
        "(prompt tokens the prefix cache did not serve) + encoder tokens computed",
    ]
    if report.assumptions:
        lines += ["", "Assumptions (the rows' 'assumes' column names those each depends on)"]
        lines += [f"  {i + 1}. {a}" for i, a in enumerate(report.assumptions)]
    if report.notes:
        lines += ["", "Findings"]
        lines += [f"  {n.severity} {n.code}: {n.message}" for n in report.notes]
    return "\n".join(lines) + "\n"


def _thin(front: list[Row]) -> list[Row]:
    ordered = sorted(front, key=lambda r: -r.measures.kv_tokens)
    step = len(ordered) - 1
    return [ordered[i * step // (FRONT_ROWS - 1)] for i in range(FRONT_ROWS)]
