"""The columnar trace as mmpool trace writes it: ids as integers only where they read back the same."""

from __future__ import annotations

import pytest

pa = pytest.importorskip("pyarrow", reason="pyarrow is not installed (pip install '.[parquet]' or '.[test]')")
pq = pytest.importorskip("pyarrow.parquet")

from mmpool_cli.traces.events import ALLOC, FREE  # noqa: E402
from mmpool_cli.traces.parquet_writer import integer_ids, write_parquet  # noqa: E402
from mmpool_cli.traces.reader import read_trace  # noqa: E402


@pytest.mark.parametrize(
    ("ids", "numbers"),
    [
        (["0", "17", "-3", "9223372036854775807", "-9223372036854775808"], [0, 17, -3, 2**63 - 1, -(2**63)]),
        (["17", "017"], None),
        (["+1"], None),
        (["1_0"], None),
        (["-0"], None),
        (["٣"], None),  # a digit, but not an ASCII one
        (["9223372036854775808"], None),
        (["1", "req1/img0"], None),
        ([" 1"], None),
    ],
)
def test_ids_are_written_as_integers_only_where_their_text_comes_back(tmp_path, ids, numbers) -> None:
    assert integer_ids(ids) == numbers
    events = [(i, ALLOC, key, 1, 0) for i, key in enumerate(ids)]
    path = str(tmp_path / "w.parquet")
    with open(path, "wb") as f:
        write_parquet(f, events, {})
    stored = pq.read_table(path).column("id")
    assert stored.type == (pa.string() if numbers is None else pa.int64())
    assert read_trace(path, 1, keep_ids=True).ids == ids
    assert "item" not in pq.read_table(path).column_names  # no item named: no column


def test_only_item_holds_nulls_a_free_giving_its_allocs_bytes_and_worker(tmp_path) -> None:
    path = tmp_path / "r.parquet"
    with path.open("wb") as f:
        write_parquet(f, [(0, ALLOC, "a", 5, 1), (1, ALLOC, "b", 7, 0), (2, FREE, "a", 0, 0)], {"a": "image 2x2"})
    schema = pq.read_schema(path)
    assert [(f.name, f.nullable) for f in schema] == [
        ("t_ns", False),
        ("op", False),
        ("id", False),
        ("bytes", False),
        ("worker", False),
        ("item", True),
    ]
    assert pa.types.is_dictionary(schema.field("op").type)
    table = pq.read_table(path)
    assert table.column("item").to_pylist() == ["image 2x2", "", None]
    assert table.column("bytes").to_pylist() == [5, 7, 5] and table.column("worker").to_pylist() == [1, 0, 1]


def test_row_groups_are_the_batches_the_reader_takes(tmp_path, monkeypatch) -> None:
    from mmpool_cli.traces import parquet_writer as trace_parquet_writer

    monkeypatch.setattr(trace_parquet_writer, "BATCH_ROWS", 3)
    path = tmp_path / "g.parquet"
    with path.open("wb") as f:
        write_parquet(f, [(t, ALLOC, str(t), 1, 0) for t in range(7)], {})
    meta = pq.ParquetFile(path).metadata
    assert [meta.row_group(i).num_rows for i in range(meta.num_row_groups)] == [3, 3, 1]
