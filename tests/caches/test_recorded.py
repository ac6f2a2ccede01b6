"""A recorded cache's records as the scheduler's lookups: read-backs, batches, bytes, refusals."""

from __future__ import annotations

import pytest

from mmpool_cli._record.mmpool_record import recfmt
from mmpool_cli.caches.recorded import recorded_lookups
from mmpool_cli.caches.replay import replay
from mmpool_cli.traces.reader import TraceError

L, INS, E, F = recfmt.CACHE_LOOKUP, recfmt.CACHE_INSERT, recfmt.CACHE_EVICT, recfmt.CACHE_FREE
INFO = {"cache": "embedding", "pid": 5, "pool": 0, "max_bytes": 100}


def rec(*events: tuple[int, int, int, int]) -> list[tuple[int, int, int, int, int]]:
    return [(t, kind, a, b, c) for t, (kind, a, b, c) in enumerate(events)]


def test_a_read_back_after_a_store_is_no_lookup_and_a_batch_ends_at_its_stores() -> None:
    got = recorded_lookups(
        INFO,
        rec(
            (L, 11, 0, 0),
            (L, 22, 0, 0),
            (INS, 11, 60, 60),
            (L, 11, 1, 60),  # SGLang's read-back of what it stored
            (INS, 22, 60, 60),
            (E, 1, 60, 0),  # 22 evicted 11: the read-back still follows
            (L, 22, 1, 60),
            (L, 22, 1, 60),  # a new batch: traffic
            (L, 22, 1, 60),  # looked up again in one batch: the server's next batch
        ),
    )
    assert list(got.lookups.keys) == [0, 1, 1, 1] and list(got.lookups.groups) == [1, 1, 2, 3]
    assert list(got.lookups.sizes) == [60, 60, 60, 60] and got.hits == 2 and got.unsized == 0
    assert replay(got.lookups, 100)[0] == got.hits  # the recorded size makes the recorded hits
    assert replay(got.lookups, 120)[0] == 2  # both fit: 22 hits twice, 11 was never looked up again


def test_an_entry_never_admitted_has_no_bytes_past_the_recorded_size() -> None:
    got = recorded_lookups(INFO, rec((L, 7, 0, 0), (INS, 7, -1, 0), (L, 7, 0, 0), (INS, 7, -1, 0)))
    assert got.unsized == 1 and list(got.lookups.sizes) == [101, 101]
    assert replay(got.lookups, 100)[0] == 0


def test_hits_followed_by_a_lookup_are_counted_as_maybe_two_batches() -> None:
    got = recorded_lookups(INFO, rec((L, 1, 0, 0), (INS, 1, 10, 10), (L, 1, 1, 10), (L, 1, 1, 10), (L, 2, 0, 0)))
    assert (got.batches, got.joined) == (2, 1)


@pytest.mark.parametrize(
    ("info", "events", "message"),
    [
        ({**INFO, "max_bytes": -1}, [], "max_bytes is -1, not a size in bytes"),
        (INFO, rec((L, 1, 0, 0), (INS, 1, 10, 10), (F, 1, 10, 0)), "took entries out of it"),
        (
            INFO,
            rec(
                (INS, 3, 10, 10),
            ),
            "stored without a lookup",
        ),
    ],
)
def test_records_the_replay_cannot_follow_are_refused(
    info: dict[str, object], events: list[tuple[int, int, int, int, int]], message: str
) -> None:
    with pytest.raises(TraceError, match=message):
        recorded_lookups(info, events)


PRE = {"cache": "preprocess", "pid": 5, "pool": 1, "max_bytes": 100, "max_entries": 2}


def test_a_preprocess_requests_misses_take_their_items_places_and_count_each_repeat() -> None:
    got = recorded_lookups(
        PRE,
        rec(
            (L, 1, 0, -1),  # request 1: images 1, 2, 1, all absent (looks the class does not count)
            (L, 2, 0, -1),
            (L, 1, 0, -1),
            (L, 1, 0, 0),  # the distinct misses claimed: one counted miss each
            (L, 2, 0, 0),
            (INS, 1, 30, 30),
            (INS, 2, 30, 60),
            (L, 3, 0, -1),  # request 2: images 3, 2; 2 a hit, recorded before 3's claimed miss
            (L, 2, 1, 30),
            (L, 3, 0, 0),
            (INS, 3, 30, 60),  # the bound on entries evicts 1, not the bytes
            (E, 1, 30, 0),
            (L, 2, 1, 30),  # a hit right after a store: a read-back is only the scheduler's
        ),
    )
    assert list(got.lookups.keys) == [0, 1, 2, 1, 1]  # 3 before 2, as request 2 had them
    assert list(got.lookups.weights) == [2, 1, 1, 1, 1]  # image 1 twice in request 1: two hits where it hits
    assert list(got.lookups.groups) == [1, 1, 2, 2, 3] and got.lookups.max_entries == 2
    assert got.hits == 2 and len(got.lookups.keys) == 5  # the class's own counts: 2 hits, 3 misses
    assert replay(got.lookups, 100)[0] == 2  # its entries bound evicts 1 (not 2, hit since)


def test_a_preprocess_manifests_bound_on_entries_must_be_a_count() -> None:
    with pytest.raises(TraceError, match="max_entries"):
        recorded_lookups({**PRE, "max_entries": "8192"}, [])
