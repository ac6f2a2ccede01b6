"""``simulate --plot``: one figure, both panels with their labels and marks, deterministic SVG."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("matplotlib")

from mmpool_cli.cli import main  # noqa: E402

ARGS = [
    "simulate",
    "--feature-size",
    "48MiB",
    "--feature-size",
    "48MiB",
    "--concurrency",
    "8",
    "--requests",
    "60",
    "--duration",
    "0.5",
    "--residency",
    "exponential",
    "--seed",
    "3",
    "--size",
    "256MiB",
    "--smallest-budget",
    "--target-fallback",
    "0.05",
]


def _figure(monkeypatch: pytest.MonkeyPatch, tmp_path: Path):
    from mmpool_cli.render import plot

    figures = []
    original = plot.build_figure

    def keep(report):
        fig = original(report)
        figures.append(fig)
        return fig

    monkeypatch.setattr(plot, "build_figure", keep)
    code = main([*ARGS, "--plot", str(tmp_path / "sim.svg")])
    assert code == 1  # 256 MiB misses the target: the figure is drawn all the same
    return figures[0]


def test_the_figure_has_both_panels_their_labels_and_marks(monkeypatch, tmp_path: Path) -> None:
    fig = _figure(monkeypatch, tmp_path)
    occupancy, fallback = fig.axes[:2]
    assert "1 tokenizer worker, TP 1, cuda_ipc, SGLang 0.5.23" in fig._suptitle.get_text()
    assert occupancy.get_xlabel() == "time (s)"
    assert occupancy.get_ylabel() == "leased (MiB)"
    assert any(ax.get_ylabel() == "% of usable" for ax in occupancy.child_axes)
    occupancy_labels = [line.get_label() for line in occupancy.get_lines()]
    assert "worker 0" in occupancy_labels
    misses = next(line for line in occupancy.get_lines() if line.get_label().startswith("fallback misses"))
    assert len(misses.get_xdata()) > 0 and misses.get_marker() == "x"
    assert fallback.get_xlabel() == "SGLANG_MM_FEATURE_CACHE_MB (MiB)"
    assert fallback.get_ylabel() == "fallback (%)"
    labels = [line.get_label() for line in fallback.get_lines()]
    assert {"by items", "by bytes", "target (5%)"} <= set(labels)
    found = next(label for label in labels if label.startswith("budget found: "))
    assert "(safe)" in found
    target = next(line for line in fallback.get_lines() if line.get_label() == "target (5%)")
    assert list(target.get_ydata()) == [5.0, 5.0]
    # replays stopped once past the target: marked apart, at lower bounds above the target, never on the curves
    stopped = next(line for line in fallback.get_lines() if line.get_label().startswith("stopped above the target"))
    assert stopped.get_marker() == "^" and len(stopped.get_xdata()) > 0
    assert all(y > 5.0 for y in stopped.get_ydata())
    curve = next(line for line in fallback.get_lines() if line.get_label() == "by items")
    assert not set(curve.get_xdata()) & set(stopped.get_xdata())


def test_the_svg_is_the_same_for_the_same_seed(tmp_path: Path) -> None:
    first, second = tmp_path / "a.svg", tmp_path / "b.svg"
    main([*ARGS, "--plot", str(first)])
    main([*ARGS, "--plot", str(second)])
    data = first.read_bytes()
    assert data == second.read_bytes()
    assert b"<dc:date>" not in data and b"mmpool simulate" in data


def test_a_file_mmpool_did_not_draw_is_never_overwritten(tmp_path: Path, capsys) -> None:
    mine = tmp_path / "notes.svg"
    mine.write_text("my own drawing")
    assert main([*ARGS, "--plot", str(mine)]) == 2
    assert mine.read_text() == "my own drawing"
    assert "mmpool did not draw it" in capsys.readouterr().err


def test_without_matplotlib_plot_is_a_usage_error_naming_the_install(monkeypatch, capsys) -> None:
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "matplotlib" else real(name, *a))
    assert main([*ARGS, "--plot", "x.svg"]) == 2
    assert "pip install matplotlib" in capsys.readouterr().err


def _figure_of(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, argv: list[str]):
    from mmpool_cli.render import plot

    figures = []
    original = plot.build_figure
    monkeypatch.setattr(plot, "build_figure", lambda report: figures.append(original(report)) or figures[-1])
    main([*argv, "--plot", str(tmp_path / "sim.png")])
    return figures[0]


def _misses(ax):
    return next(line for line in ax.get_lines() if line.get_label().startswith("fallback misses"))


def test_each_miss_is_drawn_at_its_workers_occupancy_at_that_moment(monkeypatch, tmp_path: Path) -> None:
    # one worker of 64 MiB: 40 MiB leased at 0 s; a second 40 MiB misses at 0.5 s beside it (40 MiB
    # leased); the first is given back at 1 s, and a 100 MiB item misses at 5 s into an empty pool
    mib = 1 << 20
    trace = tmp_path / "t.jsonl"
    trace.write_text(
        "\n".join(
            [
                f'{{"t": 0, "op": "alloc", "id": "a", "bytes": {40 * mib}, "worker": 0}}',
                f'{{"t": 0.5, "op": "alloc", "id": "c", "bytes": {40 * mib}, "worker": 0}}',
                '{"t": 0.6, "op": "free", "id": "c"}',
                '{"t": 1, "op": "free", "id": "a"}',
                f'{{"t": 5, "op": "alloc", "id": "b", "bytes": {100 * mib}, "worker": 0}}',
                '{"t": 5.1, "op": "free", "id": "b"}',
            ]
        )
        + "\n"
    )
    fig = _figure_of(monkeypatch, tmp_path, ["simulate", "--trace", str(trace), "--size", "64MiB"])
    misses = _misses(fig.axes[0])
    assert list(misses.get_xdata()) == [0.5, 5.0]
    assert list(misses.get_ydata()) == [40.0, 0.0]  # not the worker's peak (40) for both


LONG = [
    "simulate", "--feature-size", "48MiB", "--rate", "16", "--requests", "1600", "--duration", "1",
    "--residency", "exponential", "--workers", "4", "--size", "512MiB", "--seed", "1",
]  # fmt: skip


def test_a_long_run_of_four_workers_gets_one_readable_panel_each_with_its_envelope(monkeypatch, tmp_path: Path) -> None:
    from mmpool_cli.render import plot

    fig = _figure_of(monkeypatch, tmp_path, LONG)
    panels = [ax for ax in fig.axes if ax.get_ylabel() == "leased (MiB)"]
    assert len(panels) == 4  # one per worker, not four step lines drawn over each other
    assert [ax.get_title() for ax in panels][0].startswith("Occupancy of worker 0")
    captured = []
    monkeypatch.setattr(
        plot, "occupancy_series", lambda r, f=plot.occupancy_series: captured.append(f(r)) or captured[-1]
    )
    fig = _figure_of(monkeypatch, tmp_path, LONG)
    samples, _ = captured[0]
    panels = [ax for ax in fig.axes if ax.get_ylabel() == "leased (MiB)"]
    for w, ax in enumerate(panels):
        xs, ys = samples[w]
        assert len(xs) > 2 * plot.BINS  # more steps than the panel has room for: drawn as they are they fill it
        top = next(line for line in ax.get_lines() if line.get_label() == f"worker {w}")
        assert len(top.get_xdata()) <= 2 * plot.BINS + 2
        # the envelope keeps every peak and every trough of the exact series
        assert max(top.get_ydata()) == max(ys)
        band = ax.collections[0].get_paths()[0].vertices[:, 1]
        assert min(band) == min(ys) == 0.0
        assert max(band) == max(ys)


def test_by_items_stays_visible_beside_by_bytes(monkeypatch, tmp_path: Path) -> None:
    fig = _figure(monkeypatch, tmp_path)
    fallback = fig.axes[-1]
    items = next(line for line in fallback.get_lines() if line.get_label() == "by items")
    by_bytes = next(line for line in fallback.get_lines() if line.get_label() == "by bytes")
    # one feature size: the two rates are equal, so the curves lie on each other; both must still show
    assert list(items.get_ydata()) == list(by_bytes.get_ydata())
    assert items.get_linewidth() > by_bytes.get_linewidth() and items.get_zorder() < by_bytes.get_zorder()
    assert items.get_linestyle() != by_bytes.get_linestyle() and items.get_marker() != by_bytes.get_marker()
    assert items.get_markersize() > by_bytes.get_markersize() and items.get_markerfacecolor() == "none"
    assert items.get_color() != by_bytes.get_color()
