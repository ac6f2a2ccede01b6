"""``mmpool simulate --plot FILE``: one figure, occupancy over time and fallback against the budget.

Panel 1 is the occupancy of each worker pool over time (MiB, and % of the usable bytes on the
right), read at every recycler tick that changed the pool (its fullest moment, just before the
tick, and what the tick left), with each miss marked where it happened. Panel 2 is the fallback
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
from typing import Any

from mmpool_cli.core.units import MiB
from mmpool_cli.errors import MmpoolError
from mmpool_cli.simulate.sim_report import SimulationReport

SIGNATURE = "mmpool simulate"
NS_PER_S = 10**9


def occupancy_series(
    report: SimulationReport,
) -> tuple[dict[int, tuple[list[float], list[float]]], list[tuple[float, int]]]:
    """Per worker, the ``(seconds, MiB)`` steps of its occupancy; and every miss as ``(seconds, worker)``."""
    from mmpool_cli.simulate.cuda_ipc import Pool
    from mmpool_cli.simulate.replay import simulate

    result = report.result
    events = report.events_data
    if result is None or events is None:
        return {}, []
    samples: dict[int, tuple[list[float], list[float]]] = {w: ([0.0], [0.0]) for w in range(result.layout.workers)}
    pools: list[Pool] = []

    class Watched(Pool):
        __slots__ = ("worker",)
        worker: int

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
        pools.append(pool)
        return pool

    run = simulate(events, result.layout, record=True, pool_factory=factory)
    for w, pool in enumerate(pools):  # the end of the run
        xs, ys = samples[w]
        xs.append(run.duration_ns / NS_PER_S)
        ys.append(pool.leased_bytes / MiB)
    alloc_times = [t for t, op in zip(events.t, events.op, strict=True) if op == 0]
    misses = [
        (t / NS_PER_S, w)
        for t, w, off in zip(alloc_times, run.alloc_workers or (), run.offsets or (), strict=True)
        if off is None
    ]
    return samples, misses


def build_figure(report: SimulationReport) -> Any:
    """The figure for ``report`` (a matplotlib ``Figure``), not yet written."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(10, 8), dpi=100)
    occupancy, fallback = fig.subplots(2, 1)
    model = (
        report.model
        or (report.source.get("trace") and "trace " + os.path.basename(report.source["trace"]))
        or ("synthetic features")
    )
    result = report.result
    workers = result.layout.workers if result is not None else "?"
    noun = "tokenizer worker" if workers == 1 else "tokenizer workers"
    fig.suptitle(f"{model}: {workers} {noun}, TP {report.tp_size}, {report.transport}, SGLang {report.sglang_version}")
    samples, misses = occupancy_series(report)
    for w, (xs, ys) in samples.items():
        occupancy.plot(xs, ys, drawstyle="steps-post", linewidth=1, label=f"worker {w}")
    if misses:
        heights = {w: max(ys) if ys else 0 for w, (_, ys) in samples.items()}
        occupancy.plot(
            [t for t, _ in misses],
            [heights.get(w, 0) for _, w in misses],
            linestyle="none",
            marker="x",
            color="red",
            label=f"fallback misses ({len(misses)})",
        )
    if result is not None:
        usable = result.layout.usable_bytes / MiB
        occupancy.axhline(
            usable, color="grey", linestyle=":", linewidth=1, label=f"usable per worker ({usable:.1f} MiB)"
        )
        right = occupancy.secondary_yaxis(
            "right", functions=(lambda mib: 100 * mib / usable, lambda pct: pct * usable / 100)
        )
        right.set_ylabel("% of usable")
    else:
        occupancy.text(0.5, 0.5, "the budget is refused: nothing simulated", ha="center", transform=occupancy.transAxes)
    occupancy.set_xlabel("time (s)")
    occupancy.set_ylabel("leased (MiB)")
    occupancy.set_title("Occupancy of each worker pool (at every recycler tick)")
    occupancy.legend(loc="upper right", fontsize="small")

    search = report.search
    target = float(report.target)
    if search is not None and search.trials:
        mbs = [t.mb for t in search.trials]
        whole = [t for t in search.trials if not t.stopped]
        for basis in ("items", "bytes"):
            rates = [100 * float(t.rate(basis)) for t in whole]
            fallback.plot([t.mb for t in whole], rates, marker=".", label=f"by {basis}")
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
        fallback.plot([mb], [rate_items], marker="o", linestyle="none", label="by items (this budget)")
        fallback.plot([mb], [rate_bytes], marker="s", linestyle="none", label="by bytes (this budget)")
        fallback.plot([], [], linestyle="none", label="run --smallest-budget for the curve over budgets")
    fallback.axhline(100 * target, color="red", linestyle=":", label=f"target ({100 * target:g}%)")
    fallback.set_xlabel("SGLANG_MM_FEATURE_CACHE_MB (MiB)")
    fallback.set_ylabel("fallback (%)")
    fallback.set_title("Fallback against the budget")
    fallback.legend(loc="upper right", fontsize="small")
    fig.tight_layout()
    return fig


def write_plot(report: SimulationReport, path: str) -> None:
    """Draw ``report`` into ``path`` (.svg or .png); an existing file is replaced only if mmpool drew it."""
    import matplotlib

    fmt = os.path.splitext(path)[1].lower().lstrip(".")
    if os.path.exists(path) and not _ours(path):
        raise MmpoolError(f"--plot {path}: the file exists and mmpool did not draw it; remove it or pick another name")
    matplotlib.rcParams["svg.hashsalt"] = SIGNATURE
    fig = build_figure(report)
    metadata = (
        {"Date": None, "Creator": None, "Description": SIGNATURE}
        if fmt == "svg"
        else {"Software": None, "Description": SIGNATURE}
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


def _ours(path: str) -> bool:
    try:
        with open(path, "rb") as f:
            return SIGNATURE.encode() in f.read(1 << 16)
    except OSError:
        return False
