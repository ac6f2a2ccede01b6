"""``--plot`` of a curve: one quantity against the memory it costs, with a cost on a second axis.

``curve_figure`` draws any such curve from plain series (x in MiB, y as given): ``simulate --curve``
draws the pool's fallback by items and by bytes against the budget, the KV tokens each budget takes
on the right axis, and the budget the search recommends (``--smallest-budget``'s answer) marked; a
cache's hit rate against its size is drawn the same way. Each point is drawn as measured, joined by straight lines that
claim nothing between points. matplotlib is imported only when a figure is drawn; files are written
by ``plot.save_figure`` (deterministic SVG, only a file mmpool drew is replaced).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from mmpool_cli.core import words
from mmpool_cli.pools.budget_search import BudgetSearch
from mmpool_cli.pools.report import SimulationReport
from mmpool_cli.render.plot import _BY_BYTES, _BY_ITEMS, refuse_foreign, save_figure


@dataclass(frozen=True)
class Series:
    """One line of a curve: its points and matplotlib's style for it."""

    label: str
    xs: Sequence[float]
    ys: Sequence[float]
    style: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Mark:
    """A vertical line at ``x`` (a recommended size, say), labelled."""

    x: float
    label: str
    color: str = "green"
    linestyle: str = "-"


def curve_figure(
    title: str,
    x_label: str,
    y_label: str,
    series: Sequence[Series],
    *,
    second: Series | None = None,
    second_label: str = "",
    marks: Sequence[Mark] = (),
    notes: Sequence[str] = (),
    target: tuple[float, str] | None = None,
) -> Any:
    """A matplotlib ``Figure`` of ``series`` against x, ``second`` on a right-hand axis, ``marks`` as lines,
    ``target`` a dotted horizontal line ``(y, label)``, ``notes`` lines of text under the legend."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(10, 5.5), dpi=100)
    ax = fig.subplots()
    handles = []
    for s in series:
        handles += ax.plot(list(s.xs), list(s.ys), label=s.label, **s.style)
    if target is not None:
        handles.append(ax.axhline(target[0], color="red", linestyle=":", label=target[1]))
    for m in marks:
        handles.append(ax.axvline(m.x, color=m.color, linestyle=m.linestyle, label=m.label))
    if second is not None:
        right = ax.twinx()
        style = {"color": "tab:purple", "linestyle": "-.", "linewidth": 1.2, **second.style}
        handles += right.plot(list(second.xs), list(second.ys), label=second.label, **style)
        right.set_ylabel(second_label)
        right.set_ylim(bottom=0)
    for note in notes:
        handles += ax.plot([], [], linestyle="none", label=note)
    ax.set_xlabel(x_label)
    ax.set_ylabel(y_label)
    ax.set_ylim(bottom=0)
    ax.set_title(title)
    ax.legend(handles=handles, loc="upper right", fontsize="small")
    fig.tight_layout()
    return fig


def proof_bound(search: BudgetSearch) -> str | None:
    """How far the proof of an answer its limit stopped got (None: proven, or an estimate by design): the
    budgets checked, every one meeting the target, and those left undecided."""
    if search.exact or search.smallest_mb is None:
        return None
    said = []
    if search.checked_mb is not None:
        lo, hi = search.checked_mb
        said.append(f"every budget from {lo} to {hi} MiB meets the target")
    if search.undecided is not None:
        count, lo, hi = search.undecided
        said.append(f"{words.count(count, 'budget')} from {lo} to {hi} MiB {'is' if count == 1 else 'are'} undecided")
    return "; ".join(said) or "the proof stopped at its limit"


def pool_curve_figure(report: SimulationReport) -> Any:
    """The figure of ``simulate --curve``: fallback by items and by bytes against the budget, KV tokens on the
    right (where the model gives them), the smallest safe budget and the target marked."""
    curve = report.curve
    assert curve is not None
    mbs = [p.budget_mb for p in curve.points]
    items = [100 * p.fallback_items / p.items if p.items else 0.0 for p in curve.points]
    nbytes = [100 * p.fallback_bytes / p.bytes if p.bytes else 0.0 for p in curve.points]
    series = [Series("fallback by items", mbs, items, _BY_ITEMS), Series("fallback by bytes", mbs, nbytes, _BY_BYTES)]
    known = [p for p in curve.points if p.kv_tokens is not None]
    second = Series("KV tokens given up", [p.budget_mb for p in known], [p.kv_tokens or 0 for p in known])
    search = report.search
    marks = []
    notes = [] if known else [f"KV tokens: {_wrapped(curve.kv_unknown or 'unknown')}"]
    bound = None if search is None else proof_bound(search)
    if search is not None and search.smallest_mb is not None and bound is not None:
        # not proven: drawn apart from a proven mark (another colour, broken), with how far the proof got
        label = f"smallest safe budget: {search.smallest_mb} MiB ({search.method}, NOT PROVEN)"
        marks.append(Mark(search.smallest_mb, label, color="magenta", linestyle="-."))
        notes.append(_wrapped(f"not proven: {bound}"))
    elif search is not None and search.smallest_mb is not None:
        label = f"smallest safe budget: {search.smallest_mb} MiB ({search.method})"
        marks.append(Mark(search.smallest_mb, label))
    elif search is not None:
        notes.append(f"no budget up to {search.top_mb} MiB meets the target")
    named = report.model or report.source.get("trace")
    if report.result is not None:
        mb = report.sglang_mm_feature_cache_mb
        marks.append(Mark(mb, f"this run's budget: {mb} MiB", color="grey", linestyle="--"))
    what = os.path.basename(str(named).rstrip("/")) if named else None
    workers = report.result.layout.workers if report.result is not None else None
    layout = f"{workers} tokenizer worker{'' if workers == 1 else 's'}, " if workers else ""
    target = 100 * float(report.target)
    return curve_figure(
        f"{what or 'synthetic features'}: {layout}TP {report.tp_size}, {report.transport}, "
        f"SGLang {report.sglang_version}\nthe pool's curve: {len(mbs)} budgets, each an exact replay",
        "SGLANG_MM_FEATURE_CACHE_MB (MiB)",
        "fallback to the CPU path (%)",
        series,
        second=second if known else None,
        second_label="KV-cache tokens given up (max_total_num_tokens)",
        marks=marks,
        notes=notes,
        target=(target, f"target ({target:g}% by {report.basis})"),
    )


def _wrapped(text: str, width: int = 60) -> str:
    """A legend's note in lines of about ``width`` characters (the legend sits inside the axes)."""
    import textwrap

    return "\n".join(textwrap.wrap(text, width))


def write_curve_plot(report: SimulationReport, path: str) -> None:
    """Draw the curve of ``report`` into ``path`` (.svg or .png)."""
    refuse_foreign(path)
    save_figure(pool_curve_figure(report), path)
