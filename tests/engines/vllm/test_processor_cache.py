"""The processor cache layout and its bytes, checked against vLLM 0.34.0's _get_cache_type."""

from __future__ import annotations

import pytest

from mmpool_cli.engines.vllm import gib
from mmpool_cli.engines.vllm.processor_cache import DataParallel, api_processes, plan

GiB = 1 << 30


def test_the_layout_matches_vllms_factory(recorded):
    for row in recorded["cache_type"]:
        cache_bytes = gib.parse("--mm-processor-cache-gb", row["gb"]).bytes
        dp = DataParallel(size=row["dp"], api_server_count=row["api"], external_lb=row["external_lb"])
        want = row["layout"] or "disabled"
        assert plan(cache_bytes, row["type"], dp).layout == want, row


@pytest.mark.parametrize(
    ("dp", "processes"),
    [
        (DataParallel(), 1),
        (DataParallel(size=4), 4),  # internal LB: one API server per DP rank (serve.py:124)
        (DataParallel(size=4, rank=1), 1),  # a DP rank alone means external LB
        (DataParallel(size=4, external_lb=True), 1),
        (DataParallel(size=4, hybrid_lb=True, size_local=2), 2),
        (DataParallel(size=4, start_rank=2, size_local=2), 2),  # a start rank means hybrid LB
        (DataParallel(size=4, hybrid_lb=True), 1),
        (DataParallel(size=4, multi_port=True), 1),
        (DataParallel(size=4, api_server_count=2), 2),
        (DataParallel(headless=True), 0),
    ],
)
def test_api_processes_default_as_vllm_serve_does(dp, processes):
    assert api_processes(dp) == processes


def test_the_dp4_internal_example_holds_two_caches_per_api_process():
    c = plan(4 * GiB, "lru", DataParallel(size=4))
    assert (c.layout, c.api_processes, c.engine_core_bytes, c.api_process_bytes) == ("processor_only", 4, 0, 8 * GiB)
    assert c.host_bytes == 32 * GiB and c.shm_bytes == 0


def test_lru_keeps_the_data_in_the_engine_core_and_a_render_cache_in_the_api_process():
    c = plan(4 * GiB, "lru", DataParallel())
    assert (c.layout, c.engine_core_bytes, c.api_process_bytes, c.host_bytes) == ("lru", 4 * GiB, 4 * GiB, 8 * GiB)


def test_shm_is_one_dev_shm_segment_with_its_secret():
    c = plan(4 * GiB, "shm", DataParallel(), shm_extra_bytes=32)
    assert (c.layout, c.shm_bytes, c.shm_max_object_bytes) == ("shm", 4 * GiB + 32, 128 << 20)
    assert c.host_bytes == 4 * GiB + 32 + 4 * GiB
    # shm needs the same IPC conditions as lru: with DP 4 internal it falls back too
    assert plan(4 * GiB, "shm", DataParallel(size=4)).layout == "processor_only"


def test_hybrid_with_one_local_rank_becomes_external_and_keeps_lru():
    dp = DataParallel(size=4, hybrid_lb=True, size_local=1)
    assert dp.external_after_engine_args and plan(GiB, "lru", dp).layout == "lru"


def test_a_zero_budget_disables_it():
    c = plan(0, "lru", DataParallel(size=4))
    assert (c.layout, c.host_bytes, c.api_processes) == ("disabled", 0, 4)


def test_api_processes_match_vllm_serves_own_defaulting(recorded):
    from mmpool_cli.engines.vllm import args
    from mmpool_cli.engines.vllm.reading import Token

    for row in recorded["api_server_count"]:
        words = [Token(t, f"argv[{i}]") for i, t in enumerate(["m", *row["argv"]])]
        reading = args.read(words, serve=False)
        assert api_processes(args.data_parallel(reading)) == row["api_server_count"], row
