"""``mmpool simulate --plot FILE``: one figure, occupancy over time and fallback against the budget.

The first panels are the occupancy of each worker pool over time (MiB, and % of the usable bytes on
the right), one panel per worker up to ``MAX_PANELS``: its steps at every alloc and every recycler
tick that changed the pool, each miss marked at the worker's occupancy when it missed. A series
with more steps than a panel can show is drawn as its envelope (lowest and highest value in each
of ``BINS`` time bins), which keeps every peak and trough. The last panel is the fallback
rate, by items and by bytes, of every budget the search simulated, with the target and the
budget found marked; without ``--smallest-budget`` it shows the run's own budget and the budgets
that decide every alloc alike.

matplotlib is an optional extra and is imported only here. The SVG is deterministic: no date,
a fixed hash salt, and a ``mmpool simulate`` description so that only a file mmpool drew is ever
overwritten.
"""

from __future__ import annotations

import os
import tempfile
from typing import Any, Literal

from mmpool_cli.core.units import MiB
from mmpool_cli.errors import MmpoolError
from mmpool_cli.pools.report import SimulationReport

SIGNATURE = "mmpool simulate"
NS_PER_S = 10**9


_BY_ITEMS: dict[str, Any] = {
    "marker": "o",
    "markersize": 7,
    "markerfacecolor": "none",
    "linewidth": 2.5,
    "zorder": 2,
    "color": "C0",
}
_BY_BYTES: dict[str, Any] = {
    "marker": ".",
    "markersize": 4,
    "linestyle": "--",
    "linewidth": 1.2,
    "zorder": 3,
    "color": "C1",
}
BINS = 500  # time bins of a downsampled panel: finer than a panel's pixels, so the envelope is exact
MAX_PANELS = 8  # workers drawn one panel each; more share one panel of the fullest and emptiest


def occupancy_series(
    report: SimulationReport,
) -> tuple[dict[int, tuple[list[float], list[float]]], list[tuple[float, int, float]]]:
    """Per worker, the ``(seconds, MiB)`` steps of its occupancy; every miss as ``(seconds, worker, MiB)``.

    The steps follow every alloc and every recycler tick that changed the pool (its fullest moment,
    just before the tick, and what the tick left); a miss is at its worker's occupancy when it missed.
    """
    from mmpool_cli.pools.cuda_ipc import Pool
    from mmpool_cli.pools.replay import simulate

    result = report.result
    events = report.events_data
    if result is None or events is None:
        return {}, []
    samples: dict[int, tuple[list[float], list[float]]] = {w: ([0.0], [0.0]) for w in range(result.layout.workers)}
    pools: list[Pool] = []
    after_alloc: list[list[int]] = []  # per worker, leased bytes after each alloc (a miss leaves them)

    class Watched(Pool):
        __slots__ = ("worker",)
        worker: int

        def alloc(self, nbytes: int) -> int:
            start = super().alloc(nbytes)
            after_alloc[self.worker].append(self.leased_bytes)
            return start

        def tick(self, now: int = 0) -> int:
            xs, ys = samples[self.worker]
            xs.append(now / NS_PER_S)
            ys.append(self.leased_bytes / MiB)
            released = super().tick(now)
            xs.append(now / NS_PER_S)
            ys.append(self.leased_bytes / MiB)
            return released

    def factory(memory_size: int, data_start: int, rules: Any) -> Pool:
        pool = Watched(memory_size, data_start, rules)
        pool.worker = len(pools)
        after_alloc.append([])
        pools.append(pool)
        return pool

    run = simulate(events, result.layout, record=True, pool_factory=factory)
    alloc_times = [t for t, op in zip(events.t, events.op, strict=True) if op == 0]
    allocs: dict[int, list[tuple[int, float, bool]]] = {w: [] for w in samples}
    cursor = [0] * len(pools)
    for t, w, off in zip(alloc_times, run.alloc_workers or (), run.offsets or (), strict=False):
        leased = after_alloc[w][cursor[w]]
        cursor[w] += 1
        allocs[w].append((t, leased / MiB, off is None))
    misses: list[tuple[float, int, float]] = []
    for w, (xs, ys) in samples.items():
        # ticks and allocs of one worker, in time order (a tick at t runs before an alloc at t)
        points = sorted(
            [(x, 0, i, y) for i, (x, y) in enumerate(zip(xs, ys, strict=True))]
            + [(t / NS_PER_S, 1, i, y) for i, (t, y, _) in enumerate(allocs[w])]
        )
        xs[:] = [p[0] for p in points]
        ys[:] = [p[3] for p in points]
        misses.extend((t / NS_PER_S, w, y) for t, y, missed in allocs[w] if missed)
    for w, pool in enumerate(pools):  # the end of the run
        xs, ys = samples[w]
        xs.append(run.duration_ns / NS_PER_S)
        ys.append(pool.leased_bytes / MiB)
    misses.sort()
    return samples, misses


def envelope(xs: list[float], ys: list[float], end: float) -> tuple[list[float], list[float], list[float]]:
    """A step series cut to ``BINS`` equal time bins: each bin's left edge, lowest and highest value.

    A bin's range holds the value carried into it and every step inside it, so no peak or trough
    of the exact series is lost, however many steps it has.
    """
    width = end / BINS if end > 0 else 1.0
    edges = [i * width for i in range(BINS)]
    low = [float("inf")] * BINS
    high = [float("-inf")] * BINS
    carried = ys[0] if ys else 0.0
    j = 0
    for b in range(BINS):
        low[b] = high[b] = carried
        stop = edges[b] + width if b < BINS - 1 else float("inf")
        while j < len(xs) and xs[j] < stop:
            carried = ys[j]
            low[b] = min(low[b], carried)
            high[b] = max(high[b], carried)
            j += 1
    return edges, low, high


def _draw_occupancy(ax: Any, xs: list[float], ys: list[float], end: float, label: str, color: str) -> None:
    if len(xs) <= 2 * BINS:
        ax.plot(xs, ys, drawstyle="steps-post", linewidth=1, label=label, color=color)
        return
    edges, low, high = envelope(xs, ys, end)
    ax.fill_between(edges, low, high, step="post", color=color, alpha=0.35, linewidth=0)
    ax.plot(edges, high, drawstyle="steps-post", linewidth=0.8, label=label, color=color)


def build_figure(report: SimulationReport) -> Any:
    """The figure for ``report`` (a matplotlib ``Figure``), not yet written."""
    from matplotlib.figure import Figure

    result = report.result
    workers = result.layout.workers if result is not None else 1
    rows = workers if 1 < workers <= MAX_PANELS else 1
    height = 3.5 + 3.0 if rows == 1 else 3.5 + 1.6 * rows
    fig = Figure(figsize=(10, height), dpi=100)
    axes = fig.subplots(rows + 1, 1, height_ratios=[1.0] * rows + [(3.0 if rows == 1 else 1.6 * 1.5)])
    panels, fallback = list(axes[:-1]), axes[-1]
    for ax in panels[1:]:
        ax.sharex(panels[0])
    model = (
        report.model
        or (report.source.get("trace") and "trace " + os.path.basename(report.source["trace"]))
        or ("synthetic features")
    )
    noun = "tokenizer worker" if workers == 1 else "tokenizer workers"
    shown = workers if result is not None else "?"
    fig.suptitle(f"{model}: {shown} {noun}, TP {report.tp_size}, {report.transport}, SGLang {report.sglang_version}")
    samples, misses = occupancy_series(report)
    end = max((xs[-1] for xs, _ in samples.values() if xs), default=0.0)
    colors = [f"C{i % 10}" for i in range(max(workers, 1))]
    if rows == 1 and workers > MAX_PANELS:
        _draw_many(panels[0], samples, end)
    else:
        for w, (xs, ys) in samples.items():
            _draw_occupancy(panels[w if rows > 1 else 0], xs, ys, end, f"worker {w}", colors[w])
    for i, ax in enumerate(panels):
        mine = [m for m in misses if rows == 1 or m[1] == i]
        if mine:
            ax.plot(
                [t for t, _, _ in mine],
                [y for _, _, y in mine],
                linestyle="none",
                marker="x",
                color="red",
                label=f"fallback misses ({len(mine)})",
            )
        if result is not None:
            usable = result.layout.usable_bytes / MiB
            ax.axhline(usable, color="grey", linestyle=":", linewidth=1, label=f"usable per worker ({usable:.1f} MiB)")
            right = ax.secondary_yaxis(
                "right", functions=(lambda mib, u=usable: 100 * mib / u, lambda pct, u=usable: pct * u / 100)
            )
            right.set_ylabel("% of usable")
        else:
            ax.text(0.5, 0.5, "the budget is refused: nothing simulated", ha="center", transform=ax.transAxes)
        ax.set_ylabel("leased (MiB)")
        ax.legend(loc="upper right", fontsize="small")
        if rows > 1:
            ax.set_title(f"Occupancy of worker {i}", fontsize="medium")
    if rows == 1:
        panels[0].set_title("Occupancy of each worker pool (every alloc and recycler tick)")
    else:
        panels[0].set_title("Occupancy of worker 0 (every alloc and recycler tick)", fontsize="medium")
    panels[-1].set_xlabel("time (s)")

    search = report.search
    target = float(report.target)
    if search is not None and search.trials:
        mbs = [t.mb for t in search.trials]
        whole = [t for t in search.trials if not t.stopped]
        # equal rates (one feature size) put one curve on the other: items drawn wide and hollow
        # underneath, bytes thin and dashed on top, so both show
        curves: tuple[tuple[Literal["items", "bytes"], dict[str, Any]], ...] = (
            ("items", _BY_ITEMS),
            ("bytes", _BY_BYTES),
        )
        for basis, style in curves:
            rates = [100 * float(t.rate(basis)) for t in whole]
            fallback.plot([t.mb for t in whole], rates, label=f"by {basis}", **style)
        stopped = [t for t in search.trials if t.stopped]
        if stopped:  # their rate is only known to be above the target: a lower bound, marked as one
            fallback.plot(
                [t.mb for t in stopped],
                [100 * float(t.rate(search.basis)) for t in stopped],
                linestyle="none",
                marker="^",
                color="grey",
                label=f"stopped above the target (at least this, by {search.basis})",
            )
        if search.smallest_mb is not None:
            fallback.axvline(
                search.smallest_mb, color="green", label=f"budget found: {search.smallest_mb} MiB ({search.method})"
            )
        if search.upper_mb is not None:
            fallback.axvspan(search.smallest_mb, search.upper_mb, color="green", alpha=0.1, label="every budget meets")
        if search.fragile_mb is not None:
            fallback.axvline(
                search.fragile_mb, color="orange", linestyle="--", label=f"fragile: {search.fragile_mb} MiB"
            )
        right_end = max(search.upper_mb or 0, search.smallest_mb or 0, report.sglang_mm_feature_cache_mb)
        if right_end and right_end * 1.25 < max(mbs):  # the budgets that matter, not the top of the search
            fallback.set_xlim(0, right_end * 1.25)
    elif result is not None:
        mb = report.sglang_mm_feature_cache_mb
        rate_items = 100 * result.total("fallback_items") / max(result.total("items"), 1)
        rate_bytes = 100 * result.total("fallback_bytes") / max(result.total("bytes"), 1)
        fallback.plot([mb], [rate_items], label="by items (this budget)", **{**_BY_ITEMS, "linestyle": "none"})
        fallback.plot([mb], [rate_bytes], label="by bytes (this budget)", **{**_BY_BYTES, "linestyle": "none"})
        fallback.plot([], [], linestyle="none", label="run --smallest-budget for the curve over budgets")
    fallback.axhline(100 * target, color="red", linestyle=":", label=f"target ({100 * target:g}%)")
    fallback.set_xlabel("SGLANG_MM_FEATURE_CACHE_MB (MiB)")
    fallback.set_ylabel("fallback (%)")
    fallback.set_title("Fallback against the budget")
    fallback.legend(loc="upper right", fontsize="small")
    fig.tight_layout()
    return fig


def _draw_many(ax: Any, samples: dict[int, tuple[list[float], list[float]]], end: float) -> None:
    """More workers than panels: the fullest and the emptiest worker in each time bin."""
    lows, highs = [], []
    edges: list[float] = []
    for xs, ys in samples.values():
        edges, low, high = envelope(xs, ys, end)
        lows.append(low)
        highs.append(high)
    low = [min(col) for col in zip(*lows, strict=True)]
    high = [max(col) for col in zip(*highs, strict=True)]
    ax.fill_between(edges, low, high, step="post", color="C0", alpha=0.35, linewidth=0)
    ax.plot(edges, high, drawstyle="steps-post", linewidth=0.8, color="C0", label="fullest worker")


def write_plot(report: SimulationReport, path: str) -> None:
    """Draw ``report`` into ``path`` (.svg or .png); an existing file is replaced only if mmpool drew it."""
    refuse_foreign(path)
    save_figure(build_figure(report), path)


def refuse_foreign(path: str, signature: str = SIGNATURE) -> None:
    """A usage error when ``path`` exists and mmpool did not draw it (checked before any drawing);
    ``signature``: the command whose drawings may be replaced (``save_figure``'s)."""
    if os.path.exists(path) and not _ours(path, signature):
        raise MmpoolError(f"--plot {path}: the file exists and mmpool did not draw it; remove it or pick another name")


def save_figure(fig: Any, path: str, signature: str = SIGNATURE) -> None:
    """Write a matplotlib figure to ``path`` (its format from the name), deterministic and signed as
    ``signature`` (the command that drew it), replacing the file at once (never half-written)."""
    import matplotlib

    fmt = os.path.splitext(path)[1].lower().lstrip(".")
    refuse_foreign(path, signature)
    matplotlib.rcParams["svg.hashsalt"] = signature
    metadata = (
        {"Date": None, "Creator": None, "Description": signature}
        if fmt == "svg"
        else {"Software": None, "Description": signature}
    )
    folder = os.path.dirname(os.path.abspath(path))
    try:
        fd, tmp = tempfile.mkstemp(prefix=".mmpool-plot-", suffix="." + fmt, dir=folder)
    except OSError as e:
        raise MmpoolError(f"--plot {path}: cannot write there ({e.strerror})") from None
    try:
        with os.fdopen(fd, "wb") as f:
            fig.savefig(f, format=fmt, metadata=metadata)
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)  # as an ordinary new file, not mkstemp's 0600
        os.replace(tmp, path)
    except OSError as e:
        os.unlink(tmp)
        raise MmpoolError(f"--plot {path}: cannot write it ({e.strerror})") from None


def _ours(path: str, signature: str) -> bool:
    try:
        with open(path, "rb") as f:
            return signature.encode() in f.read(1 << 16)
    except OSError:
        return False
