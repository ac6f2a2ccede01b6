"""The compiled simulator against the pure-Python reference: the same figures, offsets and errors.

Seeded random traces go through both ``replay.simulate`` paths and both ``trace.read_trace``
paths; every field of the results (or the error message) must be equal.
"""

from __future__ import annotations

import dataclasses
import random
from pathlib import Path

import pytest

from mmpool_cli.kernels import native
from mmpool_cli.pools.allocator import PoolRules
from mmpool_cli.pools.budget_search import layout_for, no_miss_budget
from mmpool_cli.pools.replay import PoolLayout, simulate
from mmpool_cli.traces.events import ALLOC, FREE, Event, as_events
from mmpool_cli.traces.reader import TraceError, read_trace

FAST = native.FAST
pytestmark = pytest.mark.skipif(FAST is None, reason="the compiled simulator was not built (no C compiler)")


def _events(rng: random.Random, n: int, workers: int) -> list[Event]:
    timed = []
    t = 0
    for i in range(n):
        t += rng.choice([0, 0, 1, rng.randrange(1, 10**8)])
        nbytes = rng.choice([rng.randrange(1, 5000), rng.randrange(1, 1 << 22), 4096 * rng.randrange(1, 50)])
        hold = rng.choice([0, 1, rng.randrange(1, 3 * 10**8)])
        ident = f"r{i // 2}/{i}"
        timed.append((t, 2 * i, (t, ALLOC, ident, nbytes, rng.randrange(workers))))
        timed.append((t + hold, 2 * i + 1, (t + hold, FREE, ident, 0, 0)))
    timed.sort()
    return [e for _, _, e in timed]


def _both(monkeypatch: pytest.MonkeyPatch, run):  # type: ignore[no-untyped-def]
    monkeypatch.setattr(native, "FAST", FAST)
    compiled = run()
    monkeypatch.setattr(native, "FAST", None)
    reference = run()
    monkeypatch.setattr(native, "FAST", FAST)
    return compiled, reference


@pytest.mark.parametrize("seed", range(150))
def test_replay_matches_the_python_engine(seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    rng = random.Random(seed)
    workers = rng.randrange(1, 4)
    events = as_events(_events(rng, rng.randrange(1, 300), workers))
    rules = PoolRules("cuda_ipc", rng.choice([1, 256, 4096]), rng.choice([2, 8, 4096]))
    layout = PoolLayout(
        workers, rng.randrange(5000, 1 << 24), rng.randrange(0, 4000), rng.choice([1, 10**7, 50_000_000]), rules
    )
    compiled, reference = _both(monkeypatch, lambda: simulate(events, layout, record=True))
    assert dataclasses.asdict(compiled) == dataclasses.asdict(reference)
    assert compiled.offsets is not None and len(compiled.offsets) == compiled.total("items")
    # stopped early, past a limit of fallback items or bytes: the same prefix, the same figures
    limits = {
        "stop_fallback_items": rng.randrange(0, 30),
        "stop_fallback_bytes": rng.choice([None, rng.randrange(1 << 24)]),
    }
    stopped, stopped_reference = _both(monkeypatch, lambda: simulate(events, layout, record=True, **limits))
    assert dataclasses.asdict(stopped) == dataclasses.asdict(stopped_reference)

    def lay(mb: int) -> PoolLayout:
        return layout_for(mb, workers, layout.data_start, layout.recycle_ns, rules)

    first, second = _both(monkeypatch, lambda: no_miss_budget(events, lay, 1, 2000))
    assert first == second


@pytest.mark.parametrize("seed", range(12))
def test_replay_matches_the_python_engine_over_hundreds_of_free_ranges(
    seed: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Pools cut into hundreds of free ranges (many blocks of the compiled list): freed in any
    order, joined, split again by allocs of every size; the same offsets and figures."""
    rng = random.Random(seed)
    events: list[Event] = []
    t, live = 0, []
    for i in range(6000):
        t += rng.choice([1, 10, 10**6])
        if live and rng.random() < (0.3 if i < 2000 else 0.55):
            events.append((t, FREE, live.pop(rng.randrange(len(live))), 0, 0))
        else:
            nbytes = rng.choice([rng.randrange(1, 3000), 256 * rng.randrange(1, 40), rng.randrange(1, 1 << 16)])
            events.append((t, ALLOC, f"a{i}", nbytes, rng.randrange(2)))
            live.append(f"a{i}")
    rules = PoolRules("cuda_ipc", rng.choice([1, 256]), 4096)
    layout = PoolLayout(2, rng.choice([1 << 22, 1 << 26]), rng.randrange(0, 4000), rng.choice([1, 10**7]), rules)
    compiled, reference = _both(monkeypatch, lambda: simulate(as_events(events), layout, record=True))
    assert dataclasses.asdict(compiled) == dataclasses.asdict(reference)
    assert compiled.total("items") > compiled.total("fallback_items")


def test_sums_past_two_to_the_63_stay_exact(monkeypatch: pytest.MonkeyPatch) -> None:
    # 2**20 allocs of 2**44 bytes: 2**64 bytes in all, past a C int64 (held in 128 bits)
    n = 1 << 20
    events = as_events([(i, ALLOC, i, 1 << 44, 0) for i in range(n)])
    layout = PoolLayout(1, 1 << 20, 0, 10**9, PoolRules("cuda_ipc", 1, 4096))
    compiled, reference = _both(monkeypatch, lambda: simulate(events, layout))
    assert compiled.total("bytes") == reference.total("bytes") == n << 44
    assert dataclasses.asdict(compiled) == dataclasses.asdict(reference)


_ODD_LINES = [
    "",
    " ",
    "{}",
    "[1]",
    '{"t": 1e3, "op": "free", "id": "a"}',
    '{"t": -1, "op":"free","id":"a"}',
    '{"t": 0.1234567891, "op": "free", "id": "x"}',
    '{"t": 0.1000000000, "op": "alloc", "id": "z", "bytes": 9}',
    '{"t":1,"op":"alloc","id":"a","bytes":1.0}',
    '{"t":1,"op":"alloc","id":"a","bytes":5,"worker":9}',
    '{"t":1,"op":"alloc","id":"a","bytes":5,"bytes":6}',
    '{"t":01,"op":"free","id":"a"}',
    '{"t":1,"op":"alloc","id":"a\\u0062","bytes":5}',
    '{"t":1,"op":"alloc","id":"é","bytes":5, "item": "x"}',
    '{"t": 2, "op": "free", "id": "é"}',
    "x" * 5000,
    '{"t":1.50,"op":"alloc","id":"a:b","bytes":5}',
    '{"op":"free","t":3,"id":"a:b"}  ',
    '{"t":1,"op":"alloc","id":"","bytes":5}',
    '{"t":1,"op":"alloc","id":"q","bytes":17592186044417}',
    '{"t":1000000001,"op":"free","id":"q"}',
    '{"t": 3, "op": "alloc", "id": "w/1", "bytes": 5, "worker": 2, "item": "image 1x1"}',
]


def _trace(rng: random.Random) -> str:
    t = 0
    live: set[str] = set()
    lines = []
    for _ in range(rng.randrange(0, 60)):
        t = max(0, t + rng.choice([0, 0, 10**6, 10**9, -(10**6) if rng.random() < 0.02 else 0]))
        stamp = f"{t // 10**9}.{t % 10**9:09d}" if rng.random() < 0.8 else str(t // 10**9)
        if rng.random() < 0.05:
            lines.append(rng.choice(_ODD_LINES))
        elif live and rng.random() < 0.45:
            ident = rng.choice(sorted(live))
            live.discard(ident)
            lines.append(f'{{"t": {stamp}, "op": "free", "id": "{ident}"}}')
        else:
            ident = f"r{rng.randrange(30)}/{rng.randrange(3)}"
            live.add(ident)
            size = rng.randrange(1, 10**7)
            lines.append(
                f'{{"t": {stamp}, "op": "alloc", "id": "{ident}", "bytes": {size}, "worker": {rng.randrange(3)}}}'
            )
    text = "\n".join(lines) + rng.choice(["", "\n"])
    return "\ufeff" + text if rng.random() < 0.1 else text


def _read(path: Path, **options: object) -> tuple[object, ...]:
    try:
        ev = read_trace(str(path), 3, **options)  # type: ignore[arg-type]
    except TraceError as e:
        return ("error", str(e))
    columns = [list(getattr(ev, c)) for c in ("t", "op", "key", "nbytes", "worker")]
    requests = None if ev.group is None else (list(ev.group), list(ev.pack or []), list(ev.elem or []))
    return ("events", columns, requests, ev.ids)


@pytest.mark.parametrize("seed", range(400))
def test_reader_matches_the_python_reader(seed: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    rng = random.Random(seed)
    path = tmp_path / "trace.jsonl"
    path.write_text(_trace(rng), encoding="utf-8")
    options = {
        "keep_ids": rng.random() < 0.5,
        "requests": rng.random() < 0.7,
        "max_events": rng.choice([10**7, 5, 20]),
    }
    compiled, reference = _both(monkeypatch, lambda: _read(path, **options))
    assert compiled == reference


def test_reader_across_chunks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # lines that straddle the reader's chunks, and a last line without its newline
    path = tmp_path / "trace.jsonl"
    lines = []
    for i in range(40_000):
        lines.append(f'{{"t": {i}.5, "op": "alloc", "id": "req{i}/image{i % 7}", "bytes": {i + 1}, "worker": {i % 3}}}')
        lines.append(f'{{"t": {i}.75, "op": "free", "id": "req{i}/image{i % 7}"}}')
    path.write_text("\n".join(lines), encoding="utf-8")
    compiled, reference = _both(monkeypatch, lambda: _read(path, keep_ids=True))
    assert compiled == reference
    assert compiled[0] == "events"


def test_pure_python_is_chosen_by_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MMPOOL_PURE_PYTHON", "1")
    assert native.compiled("_fastsim") is None and native.compiled("_stackdist") is None
    monkeypatch.setenv("MMPOOL_PURE_PYTHON", "0")
    assert native.compiled("_fastsim") is FAST
