"""`simulate --curve --plot`: fallback against the budget, KV tokens on the right, the recommended budget marked."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

pytest.importorskip("matplotlib")

from mmpool_cli.cli import main  # noqa: E402
from mmpool_cli.render import curve_plot  # noqa: E402
from mmpool_cli.render.curve_plot import Mark, Series, curve_figure  # noqa: E402

SYNTHETIC = ["--feature-size", "48MiB", "--concurrency", "8", "--requests", "60", "--duration", "0.5", "--seed", "3"]


def _figure(monkeypatch: pytest.MonkeyPatch, argv: list[str], path: Path):
    figures = []
    original = curve_plot.pool_curve_figure

    def keep(report):
        figures.append(original(report))
        return figures[-1]

    monkeypatch.setattr(curve_plot, "pool_curve_figure", keep)
    assert main(["simulate", *argv, "--curve", "--curve-points", "12", "--plot", str(path)]) in (0, 1)
    return figures[0]


def test_fallback_against_the_budget_with_the_smallest_safe_budget_marked(monkeypatch, tmp_path: Path) -> None:
    fig = _figure(monkeypatch, [*SYNTHETIC, "--target-fallback", "0.05"], tmp_path / "c.svg")  # marked by default
    ax = fig.axes[0]
    assert ax.get_xlabel() == "SGLANG_MM_FEATURE_CACHE_MB (MiB)"
    assert ax.get_ylabel() == "fallback to the CPU path (%)"
    labels = ax.get_legend_handles_labels()[1] + [t.get_text() for t in ax.get_legend().get_texts()]
    assert "fallback by items" in labels and "fallback by bytes" in labels
    assert "target (5% by items)" in labels
    found = next(label for label in labels if label.startswith("smallest safe budget: "))
    mb = int(found.split(": ")[1].split(" ")[0])
    marks = [line for line in ax.get_lines() if line.get_label() == found]
    assert list(marks[0].get_xdata()) == [mb, mb]
    items = next(line for line in ax.get_lines() if line.get_label() == "fallback by items")
    assert len(items.get_xdata()) == 12
    said = {" ".join(label.split()) for label in labels if label.startswith("KV tokens: ")}
    assert said == {"KV tokens: give --model DIR (a model directory: its config.json gives the KV bytes per token)"}
    assert len(fig.axes) == 1


def test_the_kv_tokens_are_on_a_second_axis(monkeypatch, tmp_path: Path) -> None:
    config = {"model_type": "qwen2_5_vl", "hidden_size": 8192, "num_attention_heads": 64, "num_key_value_heads": 8}
    (tmp_path / "config.json").write_text(json.dumps({**config, "num_hidden_layers": 80}))
    argv = ["--model", str(tmp_path), "--image", "1920x1080", "--tp", "8", "--concurrency", "2", "--requests", "20"]
    fig = _figure(monkeypatch, argv, tmp_path / "c.svg")
    right = fig.axes[1]
    assert right.get_ylabel() == "KV-cache tokens given up (max_total_num_tokens)"
    kv = right.get_lines()[0]
    assert kv.get_label() == "KV tokens given up"
    assert list(kv.get_ydata()) == sorted(kv.get_ydata()) and kv.get_ydata()[0] > 0


def test_the_same_run_draws_the_same_svg_and_only_replaces_its_own(tmp_path: Path) -> None:
    path = tmp_path / "c.svg"
    argv = ["simulate", *SYNTHETIC, "--curve", "--curve-points", "6", "--plot", str(path)]
    assert main(argv) in (0, 1)
    first = path.read_bytes()
    assert main(argv) in (0, 1)
    assert path.read_bytes() == first
    foreign = tmp_path / "mine.svg"
    foreign.write_text("<svg/>")
    assert main([*argv[:-1], str(foreign)]) == 2
    assert foreign.read_text() == "<svg/>"


def test_any_curve_draws_from_plain_series() -> None:
    # a cache's hit rate against its size, say: the same machinery
    fig = curve_figure(
        "embedding cache",
        "size (MiB)",
        "hit rate (%)",
        [Series("hits", [0, 100, 200], [0.0, 40.0, 55.0])],
        second=Series("KV tokens", [0, 100, 200], [0, 1000, 2000]),
        second_label="tokens",
        marks=[Mark(150, "recommended: 150 MiB")],
    )
    ax, right = fig.axes
    assert [line.get_label() for line in ax.get_lines()] == ["hits", "recommended: 150 MiB"]
    assert right.get_ylabel() == "tokens"


def test_a_target_no_budget_meets_is_said_on_the_picture(monkeypatch, tmp_path: Path) -> None:
    # 4,200 features in flight on one worker: past SGLang's 4,096 slots, every budget falls back
    lines = [json.dumps({"t": i / 1000, "op": "alloc", "id": str(i), "bytes": 4096, "worker": 0}) for i in range(4200)]
    (tmp_path / "t.jsonl").write_text("\n".join(lines) + "\n")
    fig = _figure(monkeypatch, ["--trace", str(tmp_path / "t.jsonl")], tmp_path / "c.svg")
    labels = fig.axes[0].get_legend_handles_labels()[1]
    assert "no budget up to 17 MiB meets the target" in labels
    assert not any(label.startswith("smallest safe budget") for label in labels)


def test_an_unproven_mark_is_drawn_apart_with_how_far_its_proof_got(monkeypatch, tmp_path: Path) -> None:
    from mmpool_cli.usecases import simulate as use

    proven = _figure(monkeypatch, [*SYNTHETIC, "--target-fallback", "0.05"], tmp_path / "p.svg").axes[0]
    mark = next(line for line in proven.get_lines() if line.get_label().startswith("smallest safe budget: "))
    assert mark.get_label().endswith(" MiB (safe)") and mark.get_color() == "green" and mark.get_linestyle() == "-"
    monkeypatch.setattr(use, "CURVE_PROOF_EVENTS", 1)  # a proof of 6 replays (half the curve's 12): too few here
    rng, lines, t = random.Random(3), [], 0.0
    for n in range(40):  # features of 1 to 60 MiB on two workers, a third of them given back
        t += rng.choice([0.002, 0.01, 0.03])
        size = rng.randint(1 << 20, 60 << 20)
        lines.append({"t": round(t, 3), "op": "alloc", "id": str(n), "bytes": size, "worker": n % 2})
        if n % 3 == 2:
            lines.append({"t": round(t + 0.001, 3), "op": "free", "id": str(n - 1)})
    trace = tmp_path / "t.jsonl"
    trace.write_text("".join(json.dumps(line) + "\n" for line in lines))
    ax = _figure(monkeypatch, ["--trace", str(trace), "--workers", "2"], tmp_path / "u.svg").axes[0]
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    found = next(label for label in labels if label.startswith("smallest safe budget: "))
    assert found.endswith(" MiB (safe, NOT PROVEN)")
    mark = next(line for line in ax.get_lines() if line.get_label() == found)
    assert mark.get_color() == "magenta" and mark.get_linestyle() == "-."
    said = " ".join(next(label for label in labels if label.startswith("not proven: ")).split())
    assert said.startswith("not proven: every budget from ") and " are undecided" in said
