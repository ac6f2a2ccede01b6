"""The GPU decode pool, checked against vLLM 0.34.0's gpu_ipc_memory functions."""

from __future__ import annotations

from mmpool_cli.engines.vllm import gib
from mmpool_cli.engines.vllm.gpu_pool import DecodeRequest, decoder_bytes_per_process, kv_reserved, kv_tokens, plan


def test_each_share_matches_maybe_init_mm_gpu_ipc_pool(recorded):
    for row in recorded["gpu_pool"]:
        pool = plan(gib.parse("--mm-ipc-gpu-memory-gb", row["gb"]).bytes, row["processes"])
        assert pool is not None
        if "error" in row:
            assert pool.floors_to_zero and row["error"] == "total_bytes must be positive, got 0"
        else:
            assert pool.bytes_per_process == row["total_bytes"], row


def test_a_request_fits_exactly_when_acquire_accepts_it(recorded):
    for row in recorded["acquire"]:
        share = plan(row["total"], 1)
        assert share is not None and (row["nbytes"] <= share.bytes_per_process) == (row["error"] is None), row
        if row["nbytes"] % 3:
            continue  # a decode asks for frames x H x W x 3 bytes
        pool = plan(row["total"], 1, (DecodeRequest("video", row["nbytes"] // 3, 1, 1),))
        assert pool is not None and pool.items[0].fits == (row["error"] is None), row


def test_the_kv_reservation_matches_reserve_mm_ipc_gpu_memory(recorded):
    assert decoder_bytes_per_process() == 2 * recorded["decoder_bytes_default"] + 1_932_735_283
    for row in recorded["reserve"]:
        total = gib.parse("--mm-ipc-gpu-memory-gb", row["gb"]).bytes
        reserved = kv_reserved(total, row["api"], gpu_video_backend=row["backend"] is not None)
        pool = plan(total, row["api"], gpu_video_backend=row["backend"] is not None)
        assert pool is None or pool.kv_reserved_bytes == reserved
        assert row["available"] - reserved == row["remaining"], row


def test_the_frames_of_a_video_are_rgb_bytes():
    r = DecodeRequest("video 1920x1080", 64, 1920, 1080)
    assert r.bytes == 64 * 1920 * 1080 * 3
    pool = plan(1 << 30, 4, (r,))
    assert pool is not None and pool.bytes_per_process == 1 << 28 and not pool.items[0].fits


def test_no_pool_without_a_budget():
    assert plan(0, 4) is None


def test_kv_tokens_are_whole_blocks():
    assert kv_tokens(1 << 30, 57_344, 16) == (18_720, 18_736)
    assert kv_tokens(16 * 57_344, 57_344, 16) == (16, 16)
