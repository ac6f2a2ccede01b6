"""The ``--config FILE`` merge: spliced after the model, located in the file, refused as vLLM refuses it."""

from __future__ import annotations

import json

from mmpool_cli.core.findings import Severity
from mmpool_cli.engines.vllm import args


def test_config_file_is_spliced_after_the_model_and_located(tmp_path):
    cfg = tmp_path / "serve.yaml"
    cfg.write_text("data-parallel-size: 4\nmm-processor-cache-gb: x\nmm_processor_cache_type: shm\n")
    w, _ = args.launch_words(["vllm", "serve", "m", "--config", str(cfg), "--data-parallel-size", "2"])
    reading = args.read(w)
    assert reading.get("data_parallel_size") == 2  # the command line wins
    assert reading.get("mm_processor_cache_type") == "shm"
    (f,) = [f for f in reading.findings if f.severity is Severity.error]
    assert f.code == "flag-bad-value" and f.location == f"{cfg}:2:24"


def test_config_problems(tmp_path):
    w, _ = args.launch_words(["vllm", "serve", "m", "--config=x.yaml"])
    assert [f.code for f in args.read(w).findings] == ["config-not-merged"]
    w, _ = args.launch_words(["vllm", "serve", "m", "--config", "x.json"])
    assert [f.code for f in args.read(w).findings] == ["config-not-yaml"]
    cfg = tmp_path / "c.yaml"
    cfg.write_text("port: 8000\n")
    w, _ = args.launch_words(["vllm", "serve", "--config", str(cfg)])
    assert "vllm-no-model" in [f.code for f in args.read(w).findings]


def test_false_without_a_no_flag_does_nothing(tmp_path):
    cfg = tmp_path / "c.yaml"
    cfg.write_text(json.dumps({"headless": False, "data-parallel-external-lb": False}))
    w, _ = args.launch_words(["vllm", "serve", "m", "--config", str(cfg)])
    reading = args.read(w)
    assert [f.code for f in reading.findings] == ["vllm-config-false-ignored"]
    assert reading.get("data_parallel_external_lb") is False
