"""`tune --plot`: every candidate at its KV tokens and work per request, the front joined, today and the
recommendation marked, written as a deterministic, signed file."""

from __future__ import annotations

from fractions import Fraction
from pathlib import Path

import pytest

pytest.importorskip("matplotlib")

from mmpool_cli.errors import MmpoolError  # noqa: E402
from mmpool_cli.render.tune_plot import X_LABEL, Y_LABEL, point, tune_figure, write_tune_plot  # noqa: E402
from mmpool_cli.tune.front import mark  # noqa: E402
from mmpool_cli.tune.split import Measures, Memory, Row, TuneReport  # noqa: E402


def _row(kv: int, served: int, encoder: int, fallback: int, *, today: bool = False) -> Row:
    m = Measures(10, 1000, served, encoder, fallback, fallback * 1024, kv, kv // 100)
    values = {"kv": kv, "pool": 64 if fallback else 128, "embedding": 0 if encoder > 300 else 100}
    return Row(values, {"kv": kv * 10}, m, ("--max-total-tokens " + str(kv),), today=today)


def _report(rows: list[Row]) -> TuneReport:
    marked, status = mark(rows)
    return TuneReport(
        engine="SGLang 0.5.23",
        version="0.5.23",
        source="traffic/chats.jsonl",
        budget_bytes=4 << 30,
        budget_origin="--budget 4GiB",
        memories=(Memory("kv", "--max-total-tokens", "tokens"),),
        rows=marked,
        objective="no-fallback",
        status=status,
    )


ROWS = [
    _row(9000, 100, 500, 3),  # the most KV, but features fall back
    _row(8000, 100, 500, 0),
    _row(7000, 400, 200, 0, today=True),
    _row(6000, 400, 100, 0),  # the least work with nothing falling back: recommended
    _row(5000, 300, 300, 0),  # dominated by the row above
]


def _line(ax, label: str):
    return next(line for line in ax.get_lines() if line.get_label() == label)


def test_each_row_is_at_its_kv_tokens_and_work_per_request() -> None:
    row = ROWS[2]
    assert point(row) == (7000, float(Fraction(1000 - 400 + 200, 10)))


def test_front_today_and_recommendation_are_drawn_where_their_rows_are() -> None:
    report = _report(ROWS)
    ax = tune_figure(report).axes[0]
    assert (ax.get_xlabel(), ax.get_ylabel()) == (X_LABEL, Y_LABEL)
    labels = ax.get_legend_handles_labels()[1]
    front = [r for r in report.rows if r.on_front]
    line = _line(ax, f"the Pareto front ({len(front)})")
    assert list(line.get_xdata()) == sorted(r.measures.kv_tokens for r in front)
    today = _line(ax, "today: kv 7,000, pool 128, embedding 100")
    assert (list(today.get_xdata()), list(today.get_ydata())) == ([7000], [80.0])
    chosen = next(label for label in labels if label.startswith("recommended: "))
    assert chosen == "recommended: kv 6,000, pool 128, embedding 100"
    assert list(_line(ax, chosen).get_xdata()) == [6000]
    falling = _line(ax, "features fall back (1 splits, up to 3 features)")
    assert list(falling.get_xdata()) == [9000]
    off = _line(ax, "candidates, nothing falls back (1)")  # the dominated row, off the front
    assert list(off.get_xdata()) == [5000]
    assert "--budget 4GiB" in ax.get_title() and "objective: no-fallback" in ax.get_title()


def test_without_todays_row_nothing_is_marked_today() -> None:
    rows = [r for r in ROWS if not r.today]
    labels = tune_figure(_report(rows)).axes[0].get_legend_handles_labels()[1]
    assert not any(label.startswith("today") for label in labels)
    assert sum(label.startswith("recommended") for label in labels) == 1


def test_the_file_is_deterministic_signed_and_only_replaces_its_own(tmp_path: Path) -> None:
    report = _report(ROWS)
    svg = tmp_path / "t.svg"
    write_tune_plot(report, str(svg))
    first = svg.read_bytes()
    assert b"mmpool tune" in first
    write_tune_plot(report, str(svg))  # its own drawing: replaced, the same bytes
    assert svg.read_bytes() == first
    png = tmp_path / "t.png"
    write_tune_plot(report, str(png))
    assert png.read_bytes().startswith(b"\x89PNG")
    foreign = tmp_path / "notes.svg"
    foreign.write_text("<svg>mine</svg>")
    with pytest.raises(MmpoolError, match="mmpool did not draw it"):
        write_tune_plot(report, str(foreign))
    assert foreign.read_text() == "<svg>mine</svg>"


def test_tune_draws_its_report_and_refuses_a_format_before_any_work(run_line, tmp_path: Path) -> None:
    argv = ["mmpool", "tune", "--model", "examples/qwen2.5-vl-7b", "--from", "examples/traffic/chats.jsonl"]
    argv += ["--max-total-tokens", "2048"]
    bad = run_line([*argv, "--plot", str(tmp_path / "t.pdf")])
    assert bad.exit_code == 2 and ".svg or .png" in bad.stderr and bad.stdout == ""
    assert not (tmp_path / "t.pdf").exists()
    svg = tmp_path / "t.svg"
    done = run_line([*argv, "--plot", str(svg), "--format", "json"])
    assert done.exit_code in (0, 1), done.output
    drawn = svg.read_text()
    assert "mmpool tune" in drawn and "recommended: kv " in drawn and "today: kv 2,048" in drawn
