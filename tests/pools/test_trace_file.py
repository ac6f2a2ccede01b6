"""A trace replayed as it is read: the result and the errors of reading it whole and replaying it, in
the memory of the leases in flight."""

from __future__ import annotations

import dataclasses
import os
import random
import tracemalloc
from pathlib import Path

import pytest

from mmpool_cli.kernels import native
from mmpool_cli.pools.allocator import PoolRules
from mmpool_cli.pools.replay import PoolLayout, simulate
from mmpool_cli.pools.trace_file import TraceFile
from mmpool_cli.traces.events import ALLOC, FREE
from mmpool_cli.traces.reader import TraceError

pytestmark = pytest.mark.skipif(native.FAST is None, reason="the compiled simulator was not built (no C compiler)")

try:
    import pyarrow  # noqa: F401

    # parquet-ids: every id an integer, stored as one; parquet-nulls: those, a free's bytes and worker null
    FORMATS = ["jsonl", "parquet", "parquet-ids", "parquet-nulls"]
except ImportError:  # the columnar form needs pyarrow ('.[parquet]'); JSON lines are tested without it
    FORMATS = ["jsonl"]


def _timeline(rng: random.Random, n: int, workers: int, numeric: bool = False) -> list:
    """Allocs held for a while, freed out of order, ids used again once freed; some never freed."""
    events, live, t = [], [], 0
    for _ in range(n):
        t += rng.choice([0, 1, 1000, 20_000_000, 60_000_000])
        if live and rng.random() < 0.48:
            events.append((t, FREE, live.pop(rng.randrange(len(live))), 0, 0))
            continue
        key = str(rng.randrange(-n, 6 * n)) if numeric else f"r{rng.randrange(2 * n)}/{rng.randrange(3)}"
        if key not in live:
            nbytes = rng.choice([rng.randrange(1, 5000), rng.randrange(1, 1 << 22), 4096 * rng.randrange(1, 50)])
            events.append((t, ALLOC, key, nbytes, rng.randrange(workers)))
            live.append(key)
    return events


def _write(events: list, path: Path, form: str) -> str:
    """``events`` as a trace of the ``form`` mmpool trace writes (parquet-ids: the ids made integers)."""
    if form.startswith("parquet"):
        import pyarrow.parquet as pq

        from mmpool_cli.traces.parquet_writer import write_parquet

        numeric = form != "parquet"
        if numeric:
            events = [(t, op, NUMBERS.get(key, key), nbytes, worker) for t, op, key, nbytes, worker in events]
        with path.with_suffix(".parquet").open("wb") as f:
            write_parquet(f, events, {})
        if form == "parquet-nulls":
            import pyarrow as pa
            import pyarrow.compute as pc

            from mmpool_cli.traces.parquet_writer import write_options

            table = pq.read_table(path.with_suffix(".parquet"))
            free = pc.equal(table.column("op"), "free")
            for name in ("bytes", "worker"):
                column = table.column(name)
                nulls = pc.if_else(free, pa.scalar(None, column.type), column)
                table = table.set_column(table.schema.get_field_index(name), pa.field(name, column.type), nulls)
            pq.write_table(table, path.with_suffix(".parquet"), **write_options(numeric_ids=True))
        assert str(pq.read_schema(path.with_suffix(".parquet")).field("id").type) == ("int64" if numeric else "string")
        return str(path.with_suffix(".parquet"))
    with path.with_suffix(".jsonl").open("w") as f:
        for t, op, key, nbytes, worker in events:
            stamp = f"{t // 10**9}.{t % 10**9:09d}"
            if op == FREE:
                f.write(f'{{"t": {stamp}, "op": "free", "id": "{key}"}}\n')
            else:
                f.write(f'{{"t": {stamp}, "op": "alloc", "id": "{key}", "bytes": {nbytes}, "worker": {worker}}}\n')
    return str(path.with_suffix(".jsonl"))


def _layout(rng: random.Random, workers: int) -> PoolLayout:
    rules = PoolRules("cuda_ipc", rng.choice([1, 256]), rng.choice([2, 8, 4096]))
    return PoolLayout(
        workers, rng.randrange(5000, 1 << 24), rng.randrange(0, 4000), rng.choice([1, 10**7, 50_000_000]), rules
    )


@pytest.mark.parametrize("form", FORMATS)
@pytest.mark.parametrize("seed", range(40))
def test_replayed_as_read_gives_the_answer_of_read_then_replayed(
    tmp_path: Path, form: str, seed: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    rng = random.Random(seed)
    workers = rng.randrange(1, 4)
    events = _timeline(rng, rng.randrange(1, 1500), workers, numeric=form.startswith("parquet-"))
    if form != "jsonl" and seed % 4 == 1:
        from mmpool_cli.traces import parquet as trace_parquet

        monkeypatch.setattr(trace_parquet, "BATCH_ROWS", 37)  # leases in flight across many batches
    path = _write(events, tmp_path / "t", form)
    layout = _layout(rng, workers)
    trace = TraceFile(path, workers, 10**6)
    assert trace.streams(layout)
    streamed = trace.replay(layout)
    whole = simulate(trace.read(), layout)
    assert dataclasses.asdict(streamed) == dataclasses.asdict(whole)
    assert streamed.events == len(events)
    if seed == 3 and form in ("jsonl", "parquet"):
        # pools small enough to miss, for space and for slots: the misses' figures match too
        assert streamed.total("fallback_items") > streamed.total("slot_cap_misses") > 0


# the ids of ERRORS as integers, for the parquet-ids form (its messages name them)
NUMBERS = {"a": "1", "b": "-2", "c": "3", "z": "26", "ab": "12"}

ERRORS = [
    ([(5, ALLOC, "a", 1, 0), (4, FREE, "a", 0, 0)], {}, ":2: t=0.000000004 s comes before"),
    ([(0, ALLOC, "a", 1, 0), (1, ALLOC, "a", 1, 0)], {}, ":2: alloc of id 'a', which is still in flight"),
    # a replaying reader keeps no freed ids: it looks back to tell these two apart
    ([(0, ALLOC, "a", 1, 0), (1, FREE, "a", 0, 0), (2, FREE, "a", 0, 0)], {}, ":3: free of id 'a', which was already"),
    ([(0, ALLOC, "a", 1, 0), (1, FREE, "a", 0, 0), (2, FREE, "b", 0, 0)], {}, ":3: free of unknown id 'b'"),
    (
        [(0, ALLOC, "ab", 1, 0), (1, FREE, "ab", 0, 0), (2, ALLOC, "a", 1, 0), (3, FREE, "b", 0, 0)],
        {},
        ":4: free of un",
    ),
    ([(0, ALLOC, "a", 1, 0), (1, ALLOC, "b", 1, 1), (2, ALLOC, "c", 1, 0)], {"max_events": 2}, ":3: more than 2"),
    ([(0, ALLOC, "a", 1, 0), (1, FREE, "z", 0, 0), (2, ALLOC, "b", 1, 9)], {}, ":2: free of unknown id 'z'"),
    ([(0, ALLOC, "a", 1, 0), (1, ALLOC, "b", 1, 2)], {}, ":2: worker must be a whole number from 0 to 1"),
]


@pytest.mark.parametrize("form", FORMATS)
@pytest.mark.parametrize(("events", "options", "expected"), ERRORS)
def test_replayed_as_read_refuses_as_read_whole(tmp_path: Path, form: str, events, options, expected) -> None:
    path = _write(events, tmp_path / "t", form)
    trace = TraceFile(path, 2, options.get("max_events", 10**6))
    layout = PoolLayout(2, 1 << 20, 0, 10**7, PoolRules("cuda_ipc", 256, 4096))
    assert trace.streams(layout)
    messages = []
    for run in (lambda: trace.replay(layout), trace.read):
        with pytest.raises(TraceError) as e:
            run()
        messages.append(str(e.value).removeprefix(path))
    assert messages[0] == messages[1]
    if form.startswith("parquet-"):
        for key, number in NUMBERS.items():
            expected = expected.replace(f"id '{key}'", f"id '{number}'")
    assert messages[0].startswith(expected)


@pytest.mark.parametrize("form", [f for f in FORMATS if f != "jsonl"])
@pytest.mark.parametrize(
    ("column", "value", "given"), [("bytes", 2, "bytes 2, its alloc 1"), ("worker", 0, "worker 0, its alloc 1")]
)
def test_a_free_giving_other_bytes_or_worker_than_its_allocs_is_refused_alike(
    tmp_path: Path, form: str, column: str, value: int, given: str
) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = _write([(0, ALLOC, "a", 1, 1), (1, ALLOC, "b", 1, 0), (2, FREE, "a", 0, 0)], tmp_path / "t", form)
    table = pq.read_table(path)
    values = table.column(column).to_pylist()
    values[2] = value
    field = table.schema.field(column)
    table = table.set_column(table.schema.get_field_index(column), field, pa.array(values, field.type))
    pq.write_table(table, path)
    trace = TraceFile(path, 2, 10**6)
    layout = PoolLayout(2, 1 << 20, 0, 10**7, PoolRules("cuda_ipc", 256, 4096))
    messages = []
    for run in (lambda: trace.replay(layout), trace.read):
        with pytest.raises(TraceError) as e:
            run()
        messages.append(str(e.value).removeprefix(path))
    key = "1" if form != "parquet" else "a"
    assert messages == [f":3: free of id '{key}' gives {given}; a free's bytes and worker are null or its alloc's"] * 2


@pytest.mark.parametrize("form", FORMATS)
def test_its_memory_is_that_of_the_leases_in_flight(tmp_path: Path, form: str) -> None:
    # 200,000 events, at most 8 leases in flight: read whole they take megabytes, replayed as read a
    # few kilobytes beyond the reader's own batch (the compiled code allocates through Python's allocator,
    # which tracemalloc sees)
    events, t = [], 0

    def key(i: int) -> str:
        return str(i) if form.startswith("parquet-") else f"req{i}/0"

    for i in range(100_000):
        t += 1000
        events.append((t, ALLOC, key(i), 4096 + i % 7, i % 2))
        if i >= 8:
            events.append((t, FREE, key(i - 8), 0, 0))
    path = _write(events, tmp_path / "t", form)
    layout = PoolLayout(2, 1 << 24, 0, 10**7, PoolRules("cuda_ipc", 256, 4096))
    trace = TraceFile(path, 2, 10**6)

    def peak(run) -> int:
        tracemalloc.start()
        try:
            run()
            return tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()

    whole = peak(lambda: simulate(trace.read(), layout))
    streamed = peak(lambda: trace.replay(layout))
    assert whole > 6_000_000  # about 40 bytes an event
    assert streamed < whole / 4
    assert trace.replay(layout) == simulate(trace.read(), layout)


def test_what_cannot_be_read_again_or_needs_the_events_is_read_whole(tmp_path: Path) -> None:
    path = _write([(0, ALLOC, "a", 1, 0), (1, FREE, "a", 0, 0)], tmp_path / "t", "jsonl")
    ipc = PoolLayout(1, 1 << 20, 0, 10**7, PoolRules("cuda_ipc", 256, 4096))
    vmm = PoolLayout(1, 1 << 21, 0, 10**7, PoolRules("cuda_vmm", 256, 4096))
    assert TraceFile(path, 1, 10).streams(ipc)
    assert not TraceFile(path, 1, 10).streams(vmm)
    assert not TraceFile(path, 1, 10, keep_ids=True).streams(ipc)
    assert not TraceFile(path, 1, 10, requests=True).streams(ipc)
    assert not TraceFile("-", 1, 10).streams(ipc)  # stdin
    assert not TraceFile(str(tmp_path / "missing.jsonl"), 1, 10).streams(ipc)  # read() says what is wrong
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    assert not TraceFile(str(fifo), 1, 10).streams(ipc)
    assert TraceFile(path, 1, 10, keep_ids=True).replay(ipc) == TraceFile(path, 1, 10).replay(ipc)
