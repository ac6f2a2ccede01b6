"""``mmpool tune --plot FILE``: every candidate split, the Pareto front, today's launch and the recommendation.

One panel, each candidate a point: **KV tokens left** across (the memory's other use: the capacity,
and with it the batch, that the caches and the pool did not take) against **work per request** up
(prefill tokens plus encoder tokens computed, per request of the traffic), lower being better. These
two are what the recommendation trades once nothing falls back (the default objective: no feature
falls back, then the least work per request), so the answer reads at a glance: among the filled
points, the lowest, and how far right it sits says what it costs in KV. Splits where features fall
back to the CPU path are drawn apart (red crosses, their count in the legend) rather than on a third
axis: a user reads "falls back or not" faster from a mark than from a colour scale, and the count is
in the table. The front (no split better on every measure) is joined in order of KV tokens; today's
launch and the recommended split are marked and labelled with their settings' values.

matplotlib is imported only here; files are written by ``plot.save_figure`` (deterministic SVG, signed
``mmpool tune``, so only a file mmpool drew is replaced).
"""

from __future__ import annotations

import os
import textwrap
from typing import TYPE_CHECKING, Any

from mmpool_cli.core.units import format_size
from mmpool_cli.render.plot import refuse_foreign, save_figure

if TYPE_CHECKING:
    from mmpool_cli.tune.split import Row, TuneReport

SIGNATURE = "mmpool tune"
X_LABEL = "KV tokens left (the capacity the split leaves the KV cache)"
Y_LABEL = "work per request (prefill + encoder tokens)"


def point(row: Row) -> tuple[int, float]:
    """Where ``row`` is drawn: its KV tokens and its work per request (``Measures.work_per_request``)."""
    return row.measures.kv_tokens, float(row.measures.work_per_request)


def _values(row: Row) -> str:
    return ", ".join(f"{name} {value:,}" for name, value in row.values.items())


def _draw(ax: Any, rows: list[Row], label: str, fmt: str, **style: Any) -> None:
    xs, ys = zip(*map(point, rows), strict=True)
    ax.plot(xs, ys, fmt, label=label, **style)


def tune_figure(report: TuneReport) -> Any:
    """The figure of ``report`` (a matplotlib ``Figure``), not yet written."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(10, 6.5), dpi=100)
    ax = fig.subplots()
    clean = [r for r in report.rows if r.measures.fallback_items == 0]
    falling = [r for r in report.rows if r.measures.fallback_items > 0]
    front = sorted((r for r in report.rows if r.on_front), key=point)
    off = [r for r in clean if not r.on_front]
    if off:
        _draw(ax, off, f"candidates, nothing falls back ({len(off)})", "o", color="C0", alpha=0.35, markersize=4)
    if falling:
        worst = max(r.measures.fallback_items for r in falling)
        label = f"features fall back ({len(falling)} splits, up to {worst:,} features)"
        _draw(ax, falling, label, "x", color="C3", markersize=5)
    if front:
        _draw(ax, front, f"the Pareto front ({len(front)})", "o-", color="C0", linewidth=1.4, markersize=6)
    today = next((r for r in report.rows if r.today), None)
    chosen = next((r for r in report.rows if r.recommended), None)
    if today is not None:
        style = {"markerfacecolor": "none", "markeredgewidth": 2}
        _draw(ax, [today], f"today: {_values(today)}", "s", color="black", markersize=11, **style)
    if chosen is not None:
        _draw(ax, [chosen], f"recommended: {_values(chosen)}", "*", color="C2", markersize=16, markeredgecolor="black")
    ax.set_xlabel(X_LABEL)
    ax.set_ylabel(Y_LABEL)
    top = max((point(r)[1] for r in report.rows), default=0.0)
    ax.set_ylim(0, top * 1.08 or 1.0)  # from 0, so a gap reads as its share of the work; room above the top mark
    ax.grid(alpha=0.3)
    source = os.path.basename(report.source.split(", ")[0].rstrip("/")) or "the traffic"
    ax.set_title(
        "\n".join(
            [
                f"{report.engine}, {source}: {len(report.rows)} splits of {format_size(report.budget_bytes)} per rank",
                *textwrap.wrap(report.budget_origin, 110),
                f"objective: {report.objective}",
            ]
        ),
        fontsize=9,
    )
    # under the axes: the points that matter sit at either end of the KV axis, where a legend inside would hide them
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.12), ncol=2, fontsize="small", frameon=False)
    fig.tight_layout()
    return fig


def write_tune_plot(report: TuneReport, path: str) -> None:
    """Draw ``report`` into ``path`` (.svg or .png), atomically; an existing file only if mmpool tune drew it."""
    refuse_foreign(path, SIGNATURE)
    save_figure(tune_figure(report), path, SIGNATURE)
