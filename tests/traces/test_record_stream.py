"""traces.record_stream: a damaged recording's files are named, each with what is wrong with it and what is read.

The streams here are written with ``recfmt``'s own structs (``tests/record/streams.py``; the format is
mmpool's): a pool's and a cache's records, then the file cut as a crash or a copy cuts it.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "record"))
from streams import HEAD, SIZE, cache_recording, cache_records, pool_records, recording, write  # noqa: E402

from mmpool_cli._record.mmpool_record import recfmt  # noqa: E402
from mmpool_cli.traces.reader import TraceError  # noqa: E402
from mmpool_cli.traces.record_stream import read_caches  # noqa: E402
from mmpool_cli.traces.recording import read_recording  # noqa: E402


def lines(root: Path) -> list[str]:
    return [str(d) for d in read_recording(str(root), 2)[1].damage]


def test_a_whole_recording_has_no_damage(tmp_path: Path) -> None:
    recording(tmp_path)
    assert lines(tmp_path) == []


@pytest.mark.parametrize(
    ("keep", "what"),
    [
        (0, "empty (0 bytes): none of its events are read"),
        (20, "cut inside its 48-byte header (20 bytes): none of its events are read"),
    ],
)
def test_a_stream_emptied_or_cut_in_its_header_is_named(tmp_path: Path, keep: int, what: str) -> None:
    paths = recording(tmp_path)
    paths[6].write_bytes(paths[6].read_bytes()[:keep])
    events, rec = read_recording(str(tmp_path), 2)
    assert [str(d) for d in rec.damage] == [f"{paths[6]}: {what}"]
    assert len(events) == 20  # pool 5's, read whole


def test_every_stream_emptied_names_the_damage_not_an_idle_recording(tmp_path: Path) -> None:
    paths = recording(tmp_path)
    for path in paths.values():
        path.write_bytes(b"")
    with pytest.raises(TraceError) as e:
        read_recording(str(tmp_path), 2)
    assert str(e.value) == (
        f"{tmp_path}: no events to read: {paths[5]}: empty (0 bytes): none of its events are read "
        "(and 1 more damaged file)"
    )


def test_a_stream_cut_inside_a_record_is_named_with_the_byte(tmp_path: Path) -> None:
    paths = recording(tmp_path)
    data = paths[5].read_bytes()
    cut = HEAD + 7 * SIZE + 20
    paths[5].write_bytes(data[:cut])
    events, rec = read_recording(str(tmp_path), 2)
    assert [str(d) for d in rec.damage] == [
        f"{paths[5]}: cut inside a record at byte {HEAD + 7 * SIZE:,} of {cut:,}: the 7 records before it are read, "
        "the 20 bytes after are not, and its process's END record is missing"
    ]
    assert len(events) == 20 + 3  # pool 5's first two leases and the free of the first; pool 6's whole


def test_a_stream_without_its_end_is_named(tmp_path: Path) -> None:
    paths = recording(tmp_path)
    write(tmp_path, 6, pool_records(10), end=False)
    _, rec = read_recording(str(tmp_path), 2)
    size = HEAD + len(pool_records(10)) * SIZE
    assert [str(d) for d in rec.damage] == [
        f"{paths[6]}: ends at byte {size:,} without the END record its process writes when it ends cleanly "
        "(it was killed or is still running, or the file was cut)"
    ]


@pytest.mark.parametrize("text", ['{"format": 1, "mmpool": "0.9", "command": ["py', "", "[1, 2]"])
def test_a_run_manifest_cut_short_is_named(tmp_path: Path, text: str) -> None:
    recording(tmp_path)
    (tmp_path / recfmt.RUN_MANIFEST).write_text(text)
    [damage] = read_recording(str(tmp_path), 2)[1].damage
    assert str(damage).startswith(
        f"{tmp_path / recfmt.RUN_MANIFEST}: not the run's manifest that mmpool record wrote ("
    )
    assert str(damage).endswith("): cut short or overwritten; the pools' own files are read without it")


def test_a_cache_stream_that_stops_early_is_named_as_a_pools_is(tmp_path: Path) -> None:
    path = cache_recording(tmp_path, end=False)
    [cache] = read_caches(str(tmp_path), 10**6)
    assert len(cache.events) == len(cache_records(12)) - 1 and [str(d) for d in cache.damage] == [
        f"{path}: ends at byte {path.stat().st_size:,} without the END record its process writes when it ends "
        "cleanly (it was killed or is still running, or the file was cut)"
    ]
    whole = tmp_path / "whole"
    whole.mkdir()
    cache_recording(whole, end=True)
    assert read_caches(str(whole), 10**6)[0].damage == []


def test_a_cache_stream_cut_inside_a_record_is_named(tmp_path: Path) -> None:
    path = cache_recording(tmp_path, end=True, keep=HEAD + 5 * SIZE + 1)
    [cache] = read_caches(str(tmp_path), 10**6)
    assert len(cache.events) == 4 and [str(d) for d in cache.damage] == [
        f"{path}: cut inside a record at byte {HEAD + 5 * SIZE:,} of {HEAD + 5 * SIZE + 1:,}: the 5 records before "
        "it are read, the 1 byte after is not, and its process's END record is missing"
    ]
