"""``mmpool plan --model ... --image ...``: features named by item, KV cost, and usage errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest


def plan_json(run_line, *args: str) -> dict:
    result = run_line(["mmpool", "plan", *args, "--format", "json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def test_worked_examples_come_out_of_the_cli(run_line) -> None:
    data = plan_json(
        run_line, "--model", "qwen2.5-vl", "--image", "1024x1024", "--image", "1920x1080", "--video", "1920x1080:30:30"
    )
    assert [(f["item"], f["bytes"], f["slice_bytes"]) for f in data["features"]] == [
        ("image 1024x1024", 25_759_104, 25_759_232),
        ("image 1920x1080", 50_633_856, 50_633_984),
        ("video 1920x1080 30s@30fps", 406_425_600, 406_425_600),
    ]
    assert list(data)[-2:] == ["workload", "kv_cost"]
    assert data["workload"]["tensors"][2]["shape"] == [86_400, 1176]
    assert data["kv_cost"] is None


@pytest.mark.parametrize("video", ["1920x1080:6:29.97", "1920x1080:6:30000/1001", "1920x1080:180@30000/1001"])
def test_a_six_second_ntsc_video_is_the_180_frames_a_real_one_has(run_line, video: str) -> None:
    # 6 s at 29.97 fps: frames 0..179 start before 6 s (FFmpeg's -t 6 writes 180; torchcodec counts 180);
    # SGLang samples floor(180 / 29.97 x 2 = 12.01, to a multiple of 2) = 12 frames, resized to 560x1008:
    # 12/2 temporal groups x (560/14 x 1008/14 = 2880) patches x 1176 float32 = 81,285,120 B
    data = plan_json(run_line, "--model", "qwen2.5-vl", "--video", video)
    assert data["workload"]["tensors"][0]["shape"] == [6 * 2880, 1176]
    assert data["features"][0]["bytes"] == 81_285_120


def test_feature_size_entries_keep_working_beside_items(run_line) -> None:
    data = plan_json(run_line, "--feature-size", "6MiB", "--model", "llama4", "--image", "1920x1080")
    assert [(f["item"], f["bytes"]) for f in data["features"]] == [(None, 6_291_456), ("image 1920x1080", 10_838_016)]


def test_processor_overrides_change_the_bytes(run_line) -> None:
    data = plan_json(run_line, "--model", "qwen2-vl", "--max-pixels", "1003520", "--image", "1920x1080")
    assert data["features"][0]["bytes"] == 22_993_152


def test_not_pooled_family_says_the_pool_is_pure_cost(run_line) -> None:
    data = plan_json(run_line, "--model", "internvl", "--image", "1920x1080")
    assert data["features"] == []
    finding = next(f for f in data["findings"] if f["code"] == "model-not-pooled")
    assert "--mm-feature-transport cpu" in finding["message"]
    # and the settings to copy say the same, with no budget to set
    assert data["settings"] == {
        "env": {},
        "args": ["--tokenizer-worker-num", "1", "--mm-feature-transport", "cpu"],
        "model_path": None,
    }


def test_kv_cost_from_a_model_directory(run_line, tmp_path: Path, monkeypatch) -> None:
    config = {
        "model_type": "qwen2_5_vl",
        "hidden_size": 8192,
        "num_attention_heads": 64,
        "num_key_value_heads": 8,
        "num_hidden_layers": 80,
    }
    (tmp_path / "config.json").write_text(json.dumps(config))
    monkeypatch.setenv("SGLANG_VLM_CACHE_SIZE_MB", "0")
    data = plan_json(run_line, "--model", str(tmp_path), "--tp", "8", "--image", "1920x1080")
    kv = data["kv_cost"]
    assert (kv["cell_bytes"], kv["tokens_min"], kv["vlm_cache_mb"]) == (40_960, 26_214, 0)
    assert kv["landing_tokens_max"] > kv["tokens_max"]
    human = run_line(["mmpool", "plan", "--model", str(tmp_path), "--tp", "8", "--image", "1920x1080"]).stdout
    assert "KV tokens given up" in human
    assert "image 1920x1080" in human


def test_vmm_notes_the_positional_embeds_pool(run_line) -> None:
    data = plan_json(run_line, "--transport", "cuda_vmm")
    assert any(f["code"] == "positional-embeds-pool" for f in data["findings"])


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--model", "qwen2.5-vl", "--image", "1920x"], "--image '1920x': expected WIDTHxHEIGHT"),
        (["--model", "qwen2.5-vl", "--image", "0x0"], "at least 1 pixel"),
        (["--model", "qwen2.5-vl", "--video", "1920x1080:-30:30"], "positive"),
        (["--model", "qwen2.5-vl", "--image", "1x500"], "aspect ratio"),
        (["--model", "nonesuch"], "known families: qwen2-vl"),
        (["--model", "gemma3", "--video", "640x480:10:30"], "gemma3 takes no video"),
        (["--model", "gemma3", "--min-pixels", "100"], "--min-pixels does not apply to gemma3"),
        (["--image", "1920x1080"], "--image needs --model"),
        (["--model", "qwen2.5-vl", "--kv-cache-dtype", "fp8_e4m3"], "need --model PATH"),
        (["--model", "qwen2.5-vl", "--video", "640x480:1:1"], "SGLang samples 0 frame(s)"),
        (["--model", "a" * 5000], "not a usable path"),
        (["--model", "mmpool-tests/no-such-model"], "not in the local Hugging Face cache"),
    ],
)
def test_bad_workloads_exit_2_with_one_line(run_line, args: list[str], says: str) -> None:
    result = run_line(["mmpool", "plan", *args])
    assert result.exit_code == 2, result.output
    assert says in result.stderr
    assert result.stderr.count("\n") == 1
    assert result.stdout == ""


def test_model_dir_without_config_json(run_line, tmp_path: Path) -> None:
    result = run_line(["mmpool", "plan", "--model", str(tmp_path)])
    assert result.exit_code == 2
    assert "has no config.json" in result.stderr


@pytest.mark.parametrize("given", ["{dir}", "{dir}/config.json", "{dir}/"])
def test_settings_launch_the_model_directory_given(run_line, tmp_path: Path, given: str) -> None:
    model = tmp_path / "Qwen2.5-VL 7B"  # a space: the copied line must quote it
    model.mkdir()
    (model / "config.json").write_text(
        json.dumps({"model_type": "qwen2_5_vl", "num_hidden_layers": 2, "num_attention_heads": 2, "hidden_size": 8})
    )
    text = given.format(dir=model)
    result = run_line(["mmpool", "plan", "--model", text, "--image", "640x480"])
    assert result.exit_code == 0, result.output
    launch = f"sglang serve --model-path '{model}' --tokenizer-worker-num 1 --mm-feature-transport cuda_ipc"
    assert launch in result.stdout.splitlines()
    assert plan_json(run_line, "--model", text)["settings"]["model_path"] == str(model)
    # a family name is no model: the placeholder stays
    data = plan_json(run_line, "--model", "qwen2.5-vl")
    assert data["settings"]["model_path"] is None
