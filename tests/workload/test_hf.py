"""Reading a local model directory: family, processor settings, attention shape, and bad inputs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from mmpool_cli.errors import EXIT_USAGE, MmpoolError
from mmpool_cli.workload.hf import resolve
from mmpool_cli.workload.kv import kv_cost

QWEN25_72B = {
    "architectures": ["Qwen2_5_VLForConditionalGeneration"],
    "model_type": "qwen2_5_vl",
    "hidden_size": 8192,
    "num_attention_heads": 64,
    "num_key_value_heads": 8,
    "num_hidden_layers": 80,
    "torch_dtype": "bfloat16",
    "sliding_window": 32768,
    "use_sliding_window": False,
}
KIMI_K25 = {
    "model_type": "kimi_k25",
    "text_config": {"num_hidden_layers": 61, "kv_lora_rank": 512, "qk_rope_head_dim": 64, "num_attention_heads": 64},
}


def model_dir(tmp_path: Path, config: dict, preprocessor: dict | None = None) -> Path:
    (tmp_path / "config.json").write_text(json.dumps(config))
    if preprocessor is not None:
        (tmp_path / "preprocessor_config.json").write_text(json.dumps(preprocessor))
    return tmp_path


def cost(model, tp: int, budget_mb: int = 1024, vlm_mb: int = 0, page: int = 1):
    return kv_cost(
        model.kv,
        attn_tp=tp,
        kv_cache_dtype="auto",
        page_size=page,
        budget_mb=budget_mb,
        vlm_cache_mb=vlm_mb,
        landing_extra_bytes=None,
    )


def test_qwen25_72b_kv_cost_matches_the_worked_example(tmp_path: Path) -> None:
    # sglang-next.md §2: c = 40 960 at TP 8 (1 GiB costs 26 214 tokens), 81 920 at TP 4 (13 107)
    model = resolve(str(model_dir(tmp_path, QWEN25_72B)))
    assert model.family.name == "qwen2.5-vl"
    assert (cost(model, 8).cell_bytes, cost(model, 8).tokens_min) == (40_960, 26_214)
    assert (cost(model, 4).cell_bytes, cost(model, 4).tokens_min) == (81_920, 13_107)
    assert cost(model, 8).approximate is False


def test_qwen25_7b_vlm_cache_cost(tmp_path: Path) -> None:
    config = QWEN25_72B | {
        "hidden_size": 3584,
        "num_attention_heads": 28,
        "num_key_value_heads": 4,
        "num_hidden_layers": 28,
    }
    model = resolve(str(model_dir(tmp_path, config)))
    assert cost(model, 1).cell_bytes == 57_344
    assert cost(model, 1).tokens_min == 18_724
    assert cost(model, 1, budget_mb=0, vlm_mb=100).tokens_min == 1_828


def test_page_size_rounds_to_whole_pages(tmp_path: Path) -> None:
    c = cost(resolve(str(model_dir(tmp_path, QWEN25_72B))), 8, page=64)
    assert (c.tokens_min, c.tokens_max) == (26_176, 26_240)


def test_mla_is_not_divided_by_tp(tmp_path: Path) -> None:
    model = resolve(str(model_dir(tmp_path, KIMI_K25)))
    assert model.kv.attention == "mla"
    assert cost(model, 8).cell_bytes == cost(model, 1).cell_bytes == (512 + 64) * 61 * 2


def test_hybrid_layers_are_approximate(tmp_path: Path) -> None:
    config = {
        "model_type": "gemma3",
        "text_config": {
            "num_hidden_layers": 4,
            "num_attention_heads": 8,
            "num_key_value_heads": 4,
            "head_dim": 256,
            "layer_types": ["sliding_attention"] * 3 + ["full_attention"],
        },
    }
    assert cost(resolve(str(model_dir(tmp_path, config))), 1).approximate


def test_preprocessor_settings_are_read(tmp_path: Path) -> None:
    model = resolve(str(model_dir(tmp_path, QWEN25_72B, {"min_pixels": 3136, "max_pixels": 1_003_520})))
    assert model.settings["max_pixels"] == 1_003_520
    # video_preprocessor_config.json is absent, so transformers falls back to preprocessor_config.json
    assert model.settings["video_max_pixels"] == 1_003_520


def test_size_keys_and_their_overrides(tmp_path: Path) -> None:
    pre = {"size": {"shortest_edge": 65_536, "longest_edge": 16_777_216}, "patch_size": 16}
    model = resolve(str(model_dir(tmp_path, {"model_type": "qwen3_vl"}, pre)))
    assert (model.settings["min_pixels"], model.settings["max_pixels"], model.settings["patch_size"]) == (
        65_536,
        16_777_216,
        16,
    )
    assert model.kv is None


@pytest.mark.parametrize(
    ("setup", "says"),
    [
        (lambda d: d, "has no config.json"),
        (lambda d: (d / "config.json").write_text("{nope") and d, "not valid JSON"),
        (lambda d: (d / "config.json").write_text("[]") and d, "JSON object"),
        (lambda d: (d / "config.json").write_text('{"model_type": "bert"}') and d, "model_type 'bert'"),
        (lambda d: (d / "config.json").write_text('{"a": 1}') and d, "no 'model_type'"),
        (
            lambda d: (d / "config.json").write_text('{"model_type": "qwen2_vl", "num_hidden_layers": -1}') and d,
            "positive integer",
        ),
    ],
)
def test_bad_model_dirs_are_usage_errors(tmp_path: Path, setup, says: str) -> None:
    with pytest.raises(MmpoolError, match=says) as e:
        resolve(str(setup(tmp_path)))
    assert e.value.exit_code == EXIT_USAGE


def test_unknown_family_lists_the_known_ones() -> None:
    with pytest.raises(MmpoolError, match="known families: qwen2-vl, qwen2.5-vl"):
        resolve("qwen9-vl")


QWEN25_7B = QWEN25_72B | {
    "hidden_size": 3584,
    "num_attention_heads": 28,
    "num_key_value_heads": 4,
    "num_hidden_layers": 28,
}
HUB_ID = "Qwen/Qwen2.5-VL-7B-Instruct"


def hub_cache(root: Path, files: dict[str, dict]) -> Path:
    """A Hugging Face hub cache as huggingface_hub lays it out: refs/main names a snapshot of blobs."""
    repo = root / "models--Qwen--Qwen2.5-VL-7B-Instruct"
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text("0123abcd")
    snapshot = repo / "snapshots" / "0123abcd"
    snapshot.mkdir(parents=True)
    (repo / "blobs").mkdir()
    for name, data in files.items():
        blob = repo / "blobs" / f"blob-{name}"
        blob.write_text(json.dumps(data))
        (snapshot / name).symlink_to(Path("../../blobs") / blob.name)
    return root


def test_a_hub_id_is_read_from_the_local_hub_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import socket

    def no_network(*_args: object) -> None:
        raise AssertionError("the hub cache lookup touched the network")

    monkeypatch.setattr(socket.socket, "connect", no_network)
    cache = hub_cache(tmp_path, {"config.json": QWEN25_7B, "preprocessor_config.json": {"max_pixels": 1_003_520}})
    model = resolve(HUB_ID, hub_cache=str(cache))
    assert model.name == model.model_path == HUB_ID  # what sglang serve --model-path takes
    assert model.family.name == "qwen2.5-vl"
    assert model.settings["max_pixels"] == 1_003_520
    assert cost(model, 1).cell_bytes == 57_344


def test_a_hub_id_not_in_the_cache_says_where_it_looked(tmp_path: Path) -> None:
    with pytest.raises(MmpoolError) as e:
        resolve(HUB_ID, hub_cache=str(tmp_path))
    assert e.value.exit_code == EXIT_USAGE
    message = str(e.value)
    assert f"not in the local Hugging Face cache {tmp_path}" in message
    assert "nothing is downloaded" in message
    # only the config: the cache may hold other files of the repository and not config.json
    cache = hub_cache(tmp_path / "other", {"preprocessor_config.json": {}})
    with pytest.raises(MmpoolError, match="not in the local Hugging Face cache"):
        resolve(HUB_ID, hub_cache=str(cache))


def test_a_name_with_a_slash_that_is_no_hub_id_is_no_lookup(tmp_path: Path) -> None:
    with pytest.raises(MmpoolError, match="no such local directory"):
        resolve("qwen//x--y", hub_cache=str(tmp_path))


def _plan_in_a_fresh_process(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    environ = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "HUGGINGFACE_", "XDG_CACHE"))}
    return subprocess.run(
        [sys.executable, "-m", "mmpool_cli", "plan", "--model", HUB_ID, "--image", "1920x1080", "--format", "json"],
        capture_output=True,
        text=True,
        env=environ | {"HOME": env.pop("HOME", environ.get("HOME", "/")), **env},
        check=False,
    )


@pytest.mark.parametrize("variable", ["HF_HOME", "HF_HUB_CACHE"])
def test_the_hub_cache_follows_hf_home_and_hf_hub_cache(tmp_path: Path, variable: str) -> None:
    root = tmp_path / "hf"
    hub_cache(root / "hub" if variable == "HF_HOME" else root, {"config.json": QWEN25_7B})
    done = _plan_in_a_fresh_process({variable: str(root), "HOME": str(tmp_path / "home")})
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    assert data["workload"]["model"] == HUB_ID
    assert data["kv_cost"]["cell_bytes"] == 57_344
    assert data["features"][0]["bytes"] == 50_633_856
    # absent: the error names the directory it looked in
    done = _plan_in_a_fresh_process({variable: str(tmp_path / "empty"), "HOME": str(tmp_path / "home")})
    assert done.returncode == 2
    assert str(tmp_path / "empty") in done.stderr
    assert done.stderr.count("\n") == 1


def test_family_names_and_paths_never_import_huggingface_hub(tmp_path: Path) -> None:
    code = (
        "import sys\nfrom mmpool_cli.workload.hf import resolve\n"
        f"resolve('qwen2.5-vl'); resolve({str(model_dir(tmp_path, QWEN25_72B))!r})\n"
        "assert 'huggingface_hub' not in sys.modules, 'imported'\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr


def test_config_json_path_itself(tmp_path: Path) -> None:
    model = resolve(str(model_dir(tmp_path, QWEN25_72B, {"max_pixels": 1_003_520}) / "config.json"))
    assert model.settings["max_pixels"] == 1_003_520


def _loop(tmp_path: Path) -> str:
    (tmp_path / "loop").symlink_to(tmp_path / "loop")
    return str(tmp_path / "loop")


def _dangling(tmp_path: Path) -> str:
    (tmp_path / "gone").symlink_to(tmp_path / "nowhere")
    return str(tmp_path / "gone")


def _fifo(tmp_path: Path) -> str:
    os.mkfifo(tmp_path / "fifo")
    return str(tmp_path / "fifo")


@pytest.mark.parametrize(
    ("make", "says"),
    [
        (_loop, "a symbolic link that loops"),
        (_dangling, "a symbolic link to a missing path"),
        (lambda _tmp: "/dev/zero", "a character device, not a model directory or its config.json"),
        (_fifo, "a FIFO (named pipe), not a model directory or its config.json"),
    ],
)
def test_a_model_path_that_is_not_a_directory_or_file_says_what_it_is(tmp_path: Path, make, says: str) -> None:
    with pytest.raises(MmpoolError) as info:
        resolve(make(tmp_path))
    assert says in str(info.value)
    assert "the directory has no config.json" not in str(info.value)
    assert info.value.exit_code == EXIT_USAGE


def test_without_huggingface_hub_a_hub_id_says_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "huggingface_hub", None)
    with pytest.raises(MmpoolError, match="pip install huggingface_hub") as e:
        resolve(HUB_ID)
    assert e.value.exit_code == EXIT_USAGE
