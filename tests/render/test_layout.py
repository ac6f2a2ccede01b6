"""The layout of human output: text breaks at whitespace, never inside a number, and tables stack."""

from __future__ import annotations

from pathlib import Path

import pytest

from mmpool_cli.render.layout import Grid, Paragraph, Rows, atoms, plain, wrap


def _texts(text: str) -> list[str]:
    return [a.text for a in atoms([(text, None)])]


def test_a_number_keeps_its_unit_and_its_reading() -> None:
    assert _texts("50,633,856 B (≈48.29 MiB) of 0.05 s, 3 / 4 (75.00%) and 18,724 tokens") == [
        "50,633,856 B",
        "(≈48.29 MiB)",
        "of",
        "0.05 s,",
        "3 / 4",
        "(75.00%)",
        "and",
        "18,724",
        "tokens",
    ]


def test_styled_spans_keep_the_space_between_them() -> None:
    assert plain(wrap([("mmpool plan: ", None), ("OK", "bold"), ("  (x)", None)], 80)) == "mmpool plan: OK  (x)"


@pytest.mark.parametrize("width", [1, 5, 12, 13, 20, 40])
def test_wrapping_never_cuts_or_splits_an_atom(width: int) -> None:
    text = "4 × 268,435,456 B (256 MiB) = 1,073,741,824 B (1 GiB)  [caching allocator]"
    lines = plain(wrap([(text, None)], width)).splitlines()
    for atom in ("268,435,456 B", "(256 MiB)", "1,073,741,824 B", "(1 GiB)"):
        assert any(atom in line for line in lines), (atom, lines)
    # nothing lost or added but the breaks
    assert " ".join(lines).split() == text.split()
    # a line is over the width only when it is one atom wider than the width
    assert all(len(line) <= width or " " not in line.strip() or len(_texts(line)) == 1 for line in lines)


def test_key_value_rows_sit_side_by_side_when_they_fit_and_stack_when_not() -> None:
    rows = Rows(
        "Budget", [("requested", [("1,073,741,824 B (1 GiB)  [from --size]", None)]), ("lost", [("0 B", None)])]
    )
    assert plain(rows.lines(80)).splitlines() == [
        "Budget",
        "requested  1,073,741,824 B (1 GiB)  [from --size]",
        "lost       0 B",
    ]
    assert plain(rows.lines(20)).splitlines() == [
        "Budget",
        "requested",
        "  1,073,741,824 B",
        "  (1 GiB)  [from",
        "  --size]",
        "lost",
        "  0 B",
    ]


def test_a_grid_wraps_its_headers_before_its_numbers_and_stacks_at_last() -> None:
    grid = Grid(
        None,
        ["feature", "fit per worker"],
        [[[("50,633,856 B (≈48.29 MiB)", None)], [("5", None)]]],
        right={1},
    )
    wide = plain(grid.lines(80)).splitlines()
    assert wide[0].split() == ["feature", "fit", "per", "worker"] and wide[2].endswith("5")
    narrow = plain(grid.lines(34)).splitlines()  # the header wraps; the row stays whole
    assert "50,633,856 B (≈48.29 MiB)" in narrow[-1]
    stacked = plain(grid.lines(16)).splitlines()
    assert stacked == ["feature", "  50,633,856 B", "  (≈48.29 MiB)", "fit per worker", "  5"]


def test_no_line_ends_in_spaces() -> None:
    grid = Grid("T", ["a", "b"], [[[("x", None)], [("", None)]], [[("", None)], [("y", None)]]])
    block = Paragraph([("word   ", None)])
    for lines in (grid.lines(40), block.lines(40)):
        assert all(line == line.rstrip() for line in plain(lines).splitlines())


def test_a_comparison_stays_with_its_number() -> None:
    assert [a.text for a in atoms([("≥ 48.29 MiB so far", None)])] == ["≥ 48.29 MiB", "so", "far"]
    assert [a.text for a in atoms([("> 0% (1 so far)", None)])] == ["> 0%", "(1", "so", "far)"]
    assert [a.text for a in atoms([("≤ 0 by items", None)])] == ["≤ 0", "by", "items"]
    assert [a.text for a in atoms([("a > b", None)])] == ["a", ">", "b"]  # not before a number: a word


COMPARATORS = ("≥", "≤", ">", "<", "≈")


@pytest.mark.parametrize("columns", range(20, 81))
def test_the_search_table_never_splits_a_comparison_from_its_number(run_line, columns: int) -> None:
    log = str(Path(__file__).resolve().parent.parent.parent / "examples" / "server.log")
    argv = ["mmpool", "simulate", "--model", "qwen2.5-vl", "--from", log, "--smallest-budget"]
    result = run_line(argv, env={"COLUMNS": str(columns)})
    assert result.exit_code == 0, result.output
    table = result.stdout.split("Smallest safe budget", 1)[1].split("Settings to copy", 1)[0]
    assert "≥" in table
    for line in table.splitlines():
        assert not line.rstrip().endswith(COMPARATORS), (columns, line)
        assert not line.lstrip().startswith(tuple(f"{c} " for c in COMPARATORS)) or line.split()[1][0].isdigit()
