"""The vLLM plan: figures and findings of whole launches."""

from __future__ import annotations

import json

from mmpool_cli.core.findings import Severity
from mmpool_cli.engines.vllm import gib, versions
from mmpool_cli.engines.vllm import plan as P
from mmpool_cli.engines.vllm.encoder_budget import Gpu
from mmpool_cli.engines.vllm.processor_cache import DataParallel
from mmpool_cli.workload import hf
from mmpool_cli.workload.items import parse_image, parse_video

GiB = 1 << 30
REL = versions.release("0.34.0")


def _plan(**kw):
    kw.setdefault("model", hf.resolve("qwen2.5-vl"))
    return P.make_plan(P.VllmRequest(release=REL, **kw))


def _codes(p, severity=None):
    return [f.code for f in p.findings if severity is None or f.severity is severity]


def test_worked_example_dp4_internal_lb_four_1080p_images():
    p = _plan(dp=DataParallel(size=4), items=tuple(parse_image("1920x1080") for _ in range(4)))
    j = p.to_json()
    assert j["processor_cache"]["layout"] == "processor_only"
    assert j["processor_cache"]["api_processes"] == 4
    assert j["processor_cache"]["host_bytes"] == 32 * GiB  # 4 processes x (4 GiB cache + 4 GiB render-only cache)
    enc = j["encoder_cache"]
    assert (enc["max_num_batched_tokens"], enc["max_tokens_per_item"], enc["budget_tokens"]) == (8192, 114_688, 114_688)
    assert [i["tokens"] for i in enc["items"]] == [2691] * 4 and all(i["fits"] for i in enc["items"])
    assert enc["budget_bytes"] == 114_688 * 3584 * 2
    assert j["gpu_decode_pool"] is None and p.ok
    json.dumps(j)  # plain JSON


def test_host_memory_and_dev_shm_bounds():
    p = _plan(dp=DataParallel(size=4), host_memory=16 * GiB)
    assert "vllm-host-memory-exceeded" in _codes(p, Severity.error)
    p = _plan(cache_type="shm", shm_size=64 << 20)
    assert p.processor_cache.shm_bytes == 4 * GiB + 32 and "vllm-shm-exceeded" in _codes(p, Severity.error)


def test_the_decode_pool_floors_to_zero_with_the_smallest_fix():
    p = _plan(dp=DataParallel(size=108), ipc_gb=gib.parse("--mm-ipc-gpu-memory-gb", "1e-7"))
    f = next(f for f in p.findings if f.code == "vllm-gpu-pool-floors-to-zero")
    assert "'total_bytes must be positive, got 0'" in f.message and "give at least 1.01e-7" in f.message
    assert P.smallest_gib(108) == "1.01e-7"
    assert gib.bytes_of(float("1.01e-7")) // 108 == 1
    assert (
        _plan(dp=DataParallel(size=64), ipc_gb=gib.parse("--mm-ipc-gpu-memory-gb", "1e-7")).gpu_decode_pool[
            "bytes_per_process"
        ]
        == 1
    )


def test_a_video_larger_than_a_share_and_the_kv_it_costs(tmp_path):
    (tmp_path / "config.json").write_text(
        json.dumps(
            {
                "model_type": "qwen2_5_vl",
                "num_hidden_layers": 28,
                "num_attention_heads": 28,
                "num_key_value_heads": 4,
                "hidden_size": 3584,
                "max_position_embeddings": 128000,
            }
        )
    )
    p = _plan(
        model=hf.resolve(str(tmp_path)),
        dp=DataParallel(size=4),
        ipc_gb=gib.parse("--mm-ipc-gpu-memory-gb", "1"),
        items=(parse_video("3840x2160:30:30"),),
        gpu_video_backend=True,
        video_kwargs={"video_backend": "pynvvideocodec"},
    )
    pool = p.gpu_decode_pool
    assert pool["bytes_per_process"] == GiB // 4
    # the pynvvideocodec loader samples 32 of the 900 frames uniformly
    assert pool["items"] == [{"item": "video 3840x2160 30s@30fps", "bytes": 32 * 3840 * 2160 * 3, "fits": False}]
    assert pool["kv_reserved_bytes"] == GiB + 4 * (2 * 128 * 2**20 + 1_932_735_283)
    assert pool["kv_bytes_per_token"] == 28 * 4 * 256 * 2
    assert "vllm-decode-request-too-large" in _codes(p, Severity.error)
    assert "vllm-gpu-pool-unused" not in _codes(p)


def test_a_pool_without_a_gpu_video_backend_is_pure_cost():
    p = _plan(ipc_gb=gib.parse("--mm-ipc-gpu-memory-gb", "2"))
    assert "vllm-gpu-pool-unused" in _codes(p, Severity.warning)


def test_an_item_above_the_encoder_cache_is_refused_with_the_fix_that_works():
    p = _plan(max_model_len=32_768, items=(parse_video("1920x1080:30:30"),))
    enc = p.encoder_cache
    # qwen2_vl's loader keeps 60 of the 900 frames (2 fps): 30 pairs of 1932x1092 frames
    assert enc["budget_tokens"] == 32_768 and enc["items"][0]["tokens"] == 30 * 2691
    f = next(f for f in p.findings if f.code == "vllm-item-exceeds-encoder-cache")
    assert "--max-num-batched-tokens 80730" in f.message and "HTTP 400" in f.message


def test_disabling_video_shrinks_the_budget_to_the_image():
    p = _plan(limit_mm_per_prompt={"video": 0}, items=(parse_video("640x480:2:30"),))
    assert p.encoder_cache["budget_tokens"] == 16_384
    assert "vllm-modality-disabled" in _codes(p, Severity.error)


def test_the_gpu_decides_the_token_default():
    a100 = Gpu(85_899_345_920, "NVIDIA A100-SXM4-80GB", (8, 0))
    p = _plan(gpu=a100, model=hf.resolve("qwen3-vl"))
    assert p.encoder_cache["max_num_batched_tokens"] == 2048 and p.encoder_cache["budget_tokens"] == 16_384
    assert p.encoder_cache["embedding_bytes_per_token"] == 4096 * 4 * 2


def test_external_lb_with_dp_over_one_needs_a_moe_model(tmp_path):
    (tmp_path / "config.json").write_text(
        json.dumps({"model_type": "qwen2_5_vl", "num_hidden_layers": 2, "num_attention_heads": 2, "hidden_size": 256})
    )
    p = _plan(model=hf.resolve(str(tmp_path)), dp=DataParallel(size=4, rank=0))
    assert "vllm-external-lb-dense" in _codes(p, Severity.error)
    assert p.processor_cache.layout == "lru"  # one API process with external LB mirrors the cache
    p = _plan(dp=DataParallel(size=4, external_lb=True))
    assert "vllm-external-lb-needs-rank" in _codes(p, Severity.error)


def test_a_float_that_loses_the_decimal_is_a_warning():
    p = _plan(cache_gb=gib.parse("--mm-processor-cache-gb", "0.99999999999999999999"))
    assert "vllm-gib-rounded" in _codes(p, Severity.warning) and p.processor_cache.cache_bytes == GiB
    assert "vllm-gib-rounded" not in _codes(_plan(cache_gb=gib.parse("--mm-processor-cache-gb", "0.1")))


def test_an_item_larger_than_the_processor_cache_is_never_cached():
    p = _plan(cache_gb=gib.parse("--mm-processor-cache-gb", "0.01"), items=(parse_image("1920x1080"),))
    assert "vllm-cache-item-skipped" in _codes(p, Severity.warning)


def test_a_launch_command_is_planned_with_findings_at_its_words():
    from mmpool_cli.engines.vllm import args

    argv = [
        "vllm",
        "serve",
        "Qwen/Qwen2.5-VL-7B-Instruct",
        "-dp",
        "108",
        "--mm-ipc-gpu-memory-gb",
        "1e-7",
        "--limit-mm-per-prompt.video",
        "0",
    ]
    words, serve = args.launch_words(argv)
    reading = args.read(words, serve=serve)
    req = P.request_from_reading(reading, REL, model=hf.resolve("qwen2.5-vl"))
    p = P.make_plan(req)
    f = next(f for f in p.findings if f.code == "vllm-gpu-pool-floors-to-zero")
    assert f.location == "argv[6]"
    assert p.encoder_cache["budget_tokens"] == 16_384  # video disabled: the image alone
    assert p.processor_cache.api_processes == 108


def test_the_codec_alone_keeps_the_models_loader_for_the_decode(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "qwen2_5_vl", "hidden_size": 3584}))
    # as the checkpoints ship it; transformers builds the video processor from it too
    (tmp_path / "preprocessor_config.json").write_text(json.dumps({"min_pixels": 3136, "max_pixels": 12845056}))
    p = _plan(
        model=hf.resolve(str(tmp_path)),
        ipc_gb=gib.parse("--mm-ipc-gpu-memory-gb", "4"),
        items=(parse_video("1920x1080:30:30"),),
        gpu_video_backend=True,
        video_kwargs={"backend": "pynvvideocodec"},
    )
    # qwen2_vl samples 2 fps of the 30 s: 60 frames, decoded by PyNvVideoCodec
    assert p.gpu_decode_pool["items"][0]["bytes"] == 60 * 1920 * 1080 * 3
    assert p.encoder_cache["items"][0]["tokens"] == 30 * 2691


def test_processor_kwargs_and_pruning_leave_the_items_uncounted():
    video = (parse_video("1920x1080:30:30"),)
    for extra in ({"mm_processor_kwargs": {"fps": 1}}, {"video_pruning_rate": 0.5}):
        p = _plan(items=video, **extra)
        assert p.encoder_cache["items"] == []
        assert "vllm-item-not-counted" in _codes(p, Severity.info)
    assert _plan(items=video, video_pruning_rate=0.0).encoder_cache["items"]


def test_an_items_processed_bytes_follow_the_releases_processing():
    image = (parse_image("1920x1080"),)
    raw = _plan(items=image).to_json()
    assert raw["item_processing"]["pixel_dtype"] == "uint8"
    assert raw["encoder_cache"]["items"][0]["processor_bytes"] == 10_764 * 1176 + 24
    host = _plan(items=image, device_normalize=False).to_json()
    assert host["item_processing"]["pixel_dtype"] == "bfloat16"
    assert host["encoder_cache"]["items"][0]["processor_bytes"] == 2 * 10_764 * 1176 + 24
    # Qwen3-VL's class gained the support flag in 0.32.0: host-normalized before, raw from then on
    qwen3 = hf.resolve("qwen3-vl")
    for version, dtype in (("0.31.0", "bfloat16"), ("0.32.0", "uint8")):
        req = P.VllmRequest(release=versions.release(version), model=qwen3, items=image)
        assert P.make_plan(req).to_json()["item_processing"]["pixel_dtype"] == dtype, version
    assert _plan(model=None).to_json()["item_processing"] is None


def test_the_encoders_outputs_are_in_the_models_dtype_not_the_kv_caches():
    # an fp8 KV cache leaves the vision tower's outputs in the model's dtype; --dtype float32 doubles them
    model = hf.resolve("qwen3-vl")
    assert _plan(model=model, kv_dtype_bytes=1).encoder_cache["embedding_bytes_per_token"] == 4096 * 4 * 2
    assert _plan(model=model, dtype="float32").encoder_cache["embedding_bytes_per_token"] == 4096 * 4 * 4
