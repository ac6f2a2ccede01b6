"""``mmpool cache --plot FILE``: each cache's hits against its size (a step per exact change), the
deployment's size and the recommended one marked. matplotlib is imported only here; the SVG is
deterministic and carries a ``mmpool cache`` description, so that only a file mmpool drew is overwritten.
"""

from __future__ import annotations

from mmpool_cli.caches.replay import ONE_PASS
from mmpool_cli.caches.report import CacheReport
from mmpool_cli.core.units import MiB
from mmpool_cli.render.plot import refuse_foreign, save_figure

SIGNATURE = "mmpool cache"


def write_cache_plot(report: CacheReport, path: str) -> None:
    """Draw every cache's curve into ``path`` (.svg or .png), atomically (``plot.save_figure``)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    refuse_foreign(path, SIGNATURE)
    fig, axes = plt.subplots(len(report.caches), 1, figsize=(9, 3.2 * len(report.caches)), squeeze=False)
    for ax, c in zip(axes[:, 0], report.caches, strict=True):
        scale = MiB if c.unit == "bytes" else 1  # the encoder cache's sizes are tokens
        xs = [s / scale for s, _, _ in c.curve.steps]
        ys = [h for _, h, _ in c.curve.steps]
        if c.method == ONE_PASS:  # exact at every size: a step function
            ax.step(xs, ys, where="post", color="C0", linewidth=1.6, label=f"hits ({c.method})")
        else:  # exact at its points only
            ax.plot(xs, ys, "o-", color="C0", linewidth=1, markersize=3, label=f"hits ({c.method})")
        ax.axvline(c.size_bytes / scale, color="C3", linestyle="--", linewidth=1, label="deployment")
        if c.recommendation is not None:
            ax.axvline(
                c.recommendation.size_bytes / scale,
                color="C2",
                linestyle=":",
                linewidth=1.4,
                label=f"recommended ({c.recommendation.setting})",
            )
        ax.set_title(f"{report.engine}: {c.title}", fontsize=10)
        if c.name == "prefix":  # a prefix cache's size is the KV capacity, its hits the prompt tokens it serves
            ax.set_xlabel("KV capacity (tokens)")
            ax.set_ylabel("prompt tokens served")
        else:
            ax.set_xlabel("cache size (MiB)" if c.unit == "bytes" else "cache size (encoder tokens)")
            ax.set_ylabel("hits")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    try:
        save_figure(fig, path, SIGNATURE)
    finally:
        plt.close(fig)
