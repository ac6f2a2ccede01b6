"""Item bytes equal what vLLM's own processing made of real images, in every release and with every
``--mm-device-do-normalize``; mmpool's processor cache replay on those bytes gives vLLM's own hits."""

from __future__ import annotations

import dataclasses

import pytest

from mmpool_cli.engines.vllm import cache_items, cache_traffic, caches, item_bytes, versions
from mmpool_cli.engines.vllm import encoder_budget as eb
from mmpool_cli.engines.vllm.gib import GibValue
from mmpool_cli.engines.vllm.request import VllmRequest
from mmpool_cli.workload import hf

QWEN25 = eb.QwenVision(2, 14, 2, 2, 3136, 12_845_056, 128 * 28 * 28, 768 * 28 * 28)
GEMMA3_SIZE = 896


def _runs(item_recorded, family):
    for version, data in item_recorded["releases"].items():
        for run in data["families"][family]["runs"]:
            yield version, run


def test_every_release_and_family_was_recorded_with_the_flag_unset_on_and_off(item_recorded):
    assert sorted(item_recorded["releases"]) == ["0.30.0", "0.31.0", "0.32.0", "0.33.0", "0.34.0"]
    for data in item_recorded["releases"].values():
        assert sorted(data["families"]) == ["gemma3", "qwen2.5-vl"]
        for fam in data["families"].values():
            assert [r["mm_device_do_normalize"] for r in fam["runs"]] == [None, True, False]


@pytest.mark.parametrize("family", ["qwen2.5-vl", "gemma3"])
def test_the_flag_resolves_and_the_pixels_keep_the_dtype_vllm_gave_them(item_recorded, family):
    seen = set()
    for version, run in _runs(item_recorded, family):
        proc = item_bytes.processing(versions.release(version), family, run["mm_device_do_normalize"], None, "bfloat16")
        where = (version, family, run["mm_device_do_normalize"])
        assert proc.device_normalize == run["resolved"], where
        assert proc.model_dtype == run["model_dtype"], where
        for item in run["items"]:
            assert item["tensors"]["pixel_values"]["dtype"] == proc.pixel_dtype, where
        seen.add((version, proc.pixel_dtype))
    # the processing differs between releases where the model class gained the support flag
    if family == "gemma3":
        assert ("0.33.0", "bfloat16") in seen and ("0.34.0", "uint8") in seen
    else:
        assert ("0.30.0", "uint8") in seen and ("0.30.0", "bfloat16") in seen


def test_qwen_items_are_vllms_get_item_size_in_every_release(item_recorded):
    for version, run in _runs(item_recorded, "qwen2.5-vl"):
        proc = item_bytes.processing(versions.release(version), "qwen2.5-vl", run["mm_device_do_normalize"])
        for item in run["items"]:
            tokens = eb.image_tokens(QWEN25, item["w"], item["h"])
            where = (version, run["mm_device_do_normalize"], item["w"], item["h"])
            assert item_bytes.qwen_pixels(QWEN25, tokens, proc) == item["tensors"]["pixel_values"]["nbytes"], where
            assert item["tensors"]["image_grid_thw"]["nbytes"] == item_bytes.GRID_THW_BYTES
            assert item_bytes.qwen_item(QWEN25, tokens, proc) == item["item_size"], where


def test_gemma3_items_are_vllms_get_item_size_in_every_release(item_recorded):
    for version, run in _runs(item_recorded, "gemma3"):
        proc = item_bytes.processing(versions.release(version), "gemma3", run["mm_device_do_normalize"])
        for item in run["items"]:
            assert item["tensors"]["pixel_values"]["shape"] == [1, 3, GEMMA3_SIZE, GEMMA3_SIZE]
            assert item_bytes.gemma3_item(1, GEMMA3_SIZE, proc) == item["item_size"], (version, item["w"], item["h"])


def test_dtype_auto_downcasts_a_float32_checkpoint_and_the_flag_names_are_vllms():
    assert item_bytes.model_dtype(None, None) == "bfloat16"
    assert item_bytes.model_dtype("auto", "float16") == "float16"
    assert item_bytes.model_dtype("float", "bfloat16") == "float32"
    release = versions.release("0.34.0")
    host = item_bytes.processing(release, "qwen2.5-vl", False, "float32")
    assert (host.pixel_dtype, host.pixel_bytes) == ("float32", 4)
    forced = item_bytes.processing(release, "llama4", True)
    assert not forced.device_normalize and "forces it off" in forced.why


def _traffic(item_recorded) -> cache_traffic.ImageTraffic:
    recorded = item_recorded["releases"]["0.34.0"]
    images = recorded["traffic"]["images"]
    out = cache_traffic.ImageTraffic(["recorded"])
    out.requests = [[f"image{i}" for i in req] for req in recorded["traffic"]["requests"]]
    out.dims = {f"image{i}": (im["w"], im["h"]) for i, im in enumerate(images)}
    return out


@pytest.mark.parametrize("family", ["qwen2.5-vl", "gemma3"])
@pytest.mark.parametrize("flag", [None, False])
def test_mmpool_cache_gives_vllms_own_hits_at_every_size(item_recorded, family, flag):
    traffic = _traffic(item_recorded)
    runs = item_recorded["releases"]["0.34.0"]["families"][family]["runs"]
    rows = next(r for r in runs if r["mm_device_do_normalize"] is flag)["traffic"]
    assert len(rows) >= 5 and len({r["hits"] for r in rows}) >= 3  # the sizes tell the caches apart
    for row in rows:
        req = VllmRequest(
            release=versions.release("0.34.0"),
            model=hf.resolve(family),
            cache_gb=_gib(row["gib"]),
            device_normalize=flag,
        )
        entry = caches.processor_entry(req, traffic)
        assert (entry["hits"], entry["lookups"]) == (row["hits"], row["lookups"]), (family, flag, row["gib"])
        failed = [(f["request"], f["where"]) for f in entry["failed_requests"]]
        assert failed == _failures(row), (family, flag, row["gib"])


def _failures(row: dict) -> list[tuple[int, str]]:
    """The requests vLLM failed, in order: in the sender (an item it had found cached was evicted) or in
    the engine core (its receiver cache lacked an item)."""
    return sorted([(n, "sender") for n in row["failed"]] + [(n, "engine core") for n in row["engine_core_missed"]])


def _gib(text: str) -> GibValue:
    from mmpool_cli.engines.vllm.gib import parse

    return parse("--mm-processor-cache-gb", text)


def test_the_flag_reaches_the_processor_cache_from_every_command_reader():
    from mmpool_cli.engines.vllm import args
    from mmpool_cli.engines.vllm.flags import table
    from mmpool_cli.engines.vllm.plan import request_from_reading
    from mmpool_cli.engines.vllm.reading import Token

    words = [Token(w, f"argv[{i}]") for i, w in enumerate(["m", "--no-mm-device-do-normalize", "--dtype", "half"])]
    reading = args.read(words, flags=table("0.34.0"))
    req = request_from_reading(reading, versions.release("0.34.0"), model=hf.resolve("qwen2.5-vl"))
    assert (req.device_normalize, req.dtype) == (False, "half")
    proc = item_bytes.of_request(req)
    assert (proc.pixel_dtype, proc.pixel_bytes) == ("float16", 2)
    default = item_bytes.of_request(dataclasses.replace(req, device_normalize=None, dtype=None))
    assert (default.pixel_dtype, default.pixel_bytes) == ("uint8", 1)


def test_qwen_ring_chunks_are_what_vllms_shm_sender_stored(item_recorded):
    from mmpool_cli.engines.vllm import cache_items, processor_replay

    seen = set()
    for version, run in _runs(item_recorded, "qwen2.5-vl"):
        proc = item_bytes.processing(versions.release(version), "qwen2.5-vl", run["mm_device_do_normalize"])
        for item in run["items"]:
            tokens = eb.image_tokens(QWEN25, item["w"], item["h"])
            chunk = cache_items.shm_object_bytes(QWEN25, tokens, proc) + processor_replay.RING_CHUNK_HEADER
            assert chunk == item["ring_chunk_bytes"], (version, run["mm_device_do_normalize"], item["w"], item["h"])
            seen.add(proc.pixel_dtype)
    assert seen == {"uint8", "bfloat16"}


def test_gemma3_ring_chunks_are_what_vllms_shm_sender_stored(item_recorded):
    from mmpool_cli.engines.vllm import cache_items, processor_replay

    for version, run in _runs(item_recorded, "gemma3"):
        proc = item_bytes.processing(versions.release(version), "gemma3", run["mm_device_do_normalize"])
        chunk = cache_items.gemma3_shm_object_bytes(1, GEMMA3_SIZE, proc) + processor_replay.RING_CHUNK_HEADER
        assert {i["ring_chunk_bytes"] for i in run["items"]} == {chunk}, (version, run["mm_device_do_normalize"])


def test_gemma3_in_the_encoder_cache_is_one_crops_tokens(item_recorded):
    traffic = _traffic(item_recorded)
    req = VllmRequest(release=versions.release("0.34.0"), model=hf.resolve("gemma3"))
    processor, encoder = caches.caches(req, traffic)
    assert encoder["lookups"] == processor["lookups"] == traffic.images
    assert cache_items.traffic_items(req, traffic).tokens == dict.fromkeys(traffic.dims, 256)


@pytest.mark.parametrize("family", ["qwen2.5-vl", "gemma3"])
def test_an_images_most_tokens_are_what_vllms_encoder_budget_takes(item_recorded, family):
    from mmpool_cli.engines.vllm.plan import make_plan

    for version, run in _runs(item_recorded, family):
        req = VllmRequest(release=versions.release(version), model=hf.resolve(family), device_normalize=False)
        got = make_plan(req).encoder_cache["per_modality"]["image"]
        assert got == run["max_tokens_per_image"], (version, family, run["mm_device_do_normalize"])
