"""Hand-made cases for one pool, each with an answer worked out from SGLang 0.5.23's rules."""

from __future__ import annotations

import dataclasses

import pytest

from mmpool_cli.core.units import MiB
from mmpool_cli.engines.sglang import versions
from mmpool_cli.engines.sglang.simulation import pool_rules
from mmpool_cli.kernels import native
from mmpool_cli.pools.cuda_ipc import MISS_SLOTS, MISS_SPACE, Pool
from mmpool_cli.pools.replay import PoolLayout, simulate
from mmpool_cli.traces.events import ALLOC, FREE, as_events

REL = versions.release(versions.NEWEST)
RULES = pool_rules(REL)


def _fragmented() -> tuple[Pool, dict[str, int]]:
    """A 4096-byte pool whose free list is [(256, 768), (1280, 2048), (2304, 4096)] after a tick."""
    pool = Pool(4096, 0, RULES)
    at = {name: pool.alloc(size) for name, size in [("a", 256), ("b", 512), ("c", 512), ("d", 768), ("e", 256)]}
    assert at == {"a": 0, "b": 256, "c": 768, "d": 1280, "e": 2048}
    pool.ack(at["b"], 512)
    pool.ack(at["d"], 768)
    assert pool.tick() == 1280
    assert pool.free_ranges() == [(256, 768), (1280, 2048), (2304, 4096)]
    return pool, at


def test_sizes_round_up_to_256_bytes() -> None:
    pool = Pool(4096, 0, RULES)
    assert pool.alloc(1) == 0
    assert pool.alloc(257) == 256
    assert pool.alloc(256) == 768
    assert pool.leased_bytes == 1024


def test_best_fit_ties_go_to_the_lowest_list_index_not_the_lowest_start() -> None:
    pool, _ = _fragmented()
    assert pool.alloc(1536) == 2304  # best fit; its rest (3840, 4096) goes to the end of the list
    assert pool.alloc(512) == 256  # exact fit
    assert pool.alloc(512) == 1280  # from (1280, 2048); its rest (1792, 2048) goes to the end
    assert pool.free_ranges() == [(3840, 4096), (1792, 2048)]
    assert pool.alloc(200) == 3840  # two 256-byte ranges: the earlier in the list wins


def test_the_tick_sorts_the_free_list_by_start() -> None:
    pool, _ = _fragmented()
    assert [pool.alloc(n) for n in (1536, 512, 512)] == [2304, 256, 1280]
    pool.tick()  # leases are in flight, so SGLang sorts the list even though none was acknowledged
    assert pool.free_ranges() == [(1792, 2048), (3840, 4096)]
    assert pool.alloc(200) == 1792


def test_released_neighbours_merge_at_the_tick_and_not_before() -> None:
    pool, at = _fragmented()
    pool.ack(at["c"], 512)
    assert pool.alloc(1792) == 2304  # the acknowledged lease is still in flight: no 1792+ range yet besides the tail
    pool.ack(2304, 1792)
    assert pool.alloc(1792) == MISS_SPACE  # acknowledged but not yet ticked
    pool.tick()
    assert pool.free_ranges() == [(256, 2048), (2304, 4096)]
    assert pool.alloc(1792) == 256


def test_the_4096th_lease_is_the_last_in_flight() -> None:
    pool = Pool(2 * MiB, REL.header_bytes(1), RULES)
    offsets = [pool.alloc(256) for _ in range(4096)]
    assert offsets == [REL.header_bytes(1) + 256 * i for i in range(4096)]
    assert pool.alloc(256) == MISS_SLOTS
    pool.ack(offsets[7], 256)
    assert pool.alloc(256) == MISS_SLOTS  # acknowledged, not yet given back
    pool.tick()
    assert pool.alloc(256) == offsets[7]  # best fit: the freed 256 bytes, not the tail


def test_a_feature_larger_than_any_range_misses_for_space_even_with_no_slots() -> None:
    pool = Pool(4096, 0, dataclasses.replace(RULES, max_leases=1))
    assert pool.alloc(256) == 0
    assert pool.alloc(4096) == MISS_SPACE
    assert pool.alloc(256) == MISS_SLOTS


def test_a_tick_with_nothing_in_flight_changes_nothing() -> None:
    pool = Pool(4096, 0, RULES)
    assert pool.tick() == 0
    assert pool.free_ranges() == [(0, 4096)]
    assert not pool.dirty


def test_fresh_pool_holds_42_six_mib_features_at_256_mib_and_tp8() -> None:
    # sglang-next.md section 4: 256 MiB with C=8 has data_start 147456 and holds 42 leases of 6 MiB
    pool = Pool(256 * MiB, REL.header_bytes(8), RULES)
    assert REL.header_bytes(8) == 147_456
    offsets = [pool.alloc(6 * MiB) for _ in range(43)]
    assert offsets[:42] == [147_456 + 6 * MiB * i for i in range(42)]
    assert offsets[42] == MISS_SPACE
    assert pool.largest_free == 256 * MiB - 147_456 - 42 * 6 * MiB


def test_a_pool_smaller_than_its_header_is_refused() -> None:
    with pytest.raises(ValueError, match="cannot hold"):
        Pool(131_072, 147_456, RULES)


# A free range of exactly the size asked for, at offset 0 (a pool without a header, as every
# cuda_vmm pool is): SGLang's best fit (multimodal/transport/memory_pool.py:250-257) takes every
# range with ``end - start >= allocation_bytes`` and the min of (size, index, start, end), so an
# exact fit is taken, whatever its start. Worked by hand for a 2048-byte pool, 256-byte slices,
# ticks every 10 ns:
#   t=0 a (512 B) takes [0, 512), the rest [512, 2048) is appended; b (256 B) takes [512, 768),
#   [768, 2048) is appended; a is acknowledged. The tick at 0 (b in flight) gives back a and
#   merges: [(0, 512), (768, 2048)]. t=1 c (512 B): candidates (512, 0, 0, 512) and
#   (1280, 1, 768, 2048), so c takes offset 0; then d (1280 B) takes [768, 2048) exactly.
EXACT_FIT = [
    (0, ALLOC, "a", 512, 0),
    (0, ALLOC, "b", 256, 0),
    (0, FREE, "a", 0, 0),
    (1, ALLOC, "c", 512, 0),
    (1, ALLOC, "d", 1280, 0),
]


def test_a_free_range_of_exactly_the_size_at_offset_0_is_taken() -> None:
    pool = Pool(2048, 0, RULES)
    assert pool.alloc(2048) == 0  # the whole fresh pool, exactly
    fresh = Pool(2048, 0, RULES)
    assert [fresh.alloc(n) for n in (512, 256)] == [0, 512]
    fresh.ack(0, 512)
    fresh.tick()
    assert fresh.free_ranges() == [(0, 512), (768, 2048)]
    assert fresh.alloc(512) == 0


@pytest.mark.parametrize("engine", ["python", "compiled"])
def test_the_replay_takes_an_exact_fit_at_offset_0(engine: str, monkeypatch: pytest.MonkeyPatch) -> None:
    if engine == "python":
        monkeypatch.setattr(native, "FAST", None)
    elif native.FAST is None:
        pytest.skip("the compiled simulator was not built (no C compiler)")
    layout = PoolLayout(1, 2048, 0, 10, RULES)
    result = simulate(as_events(EXACT_FIT), layout, record=True)
    assert result.offsets == [0, 512, 0, 768]
    assert result.total("fallback_items") == 0
