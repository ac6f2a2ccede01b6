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
