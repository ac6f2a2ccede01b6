"""The pool's environment variables, read by one rule (SGLang 0.5.23's environ.py) in every command."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

HUGE = "17592186044416"  # MiB: SGLang's int() takes it, and 2**44 MiB is 2**64 bytes (cuda_ipc.py:16)


def test_a_huge_budget_is_shown_as_sglang_computes_it_beside_its_failure(run_line) -> None:
    env = {"SGLANG_MM_FEATURE_CACHE_MB": HUGE}
    human = run_line(["mmpool", "plan"], env=env)
    assert human.exit_code == 1
    assert "requested                   18,446,744,073,709,551,616 B" in human.stdout
    assert "SGLANG_MM_FEATURE_CACHE_MB  17592186044416" in human.stdout
    assert "1,073,741,824" not in human.stdout  # not SGLang's default: SGLang does not fall back here
    data = json.loads(run_line(["mmpool", "plan", "--format", "json"], env=env).stdout)
    assert data["budget_bytes"] == 2**64 == data["effective_budget_bytes"]
    assert data["sglang_mm_feature_cache_mb"] == 2**44
    assert "env-budget-too-large" in [f["code"] for f in data["findings"]]


LAUNCH = ["python", "-m", "sglang.launch_server", "--model-path", "M"]
# every command that reads SGLANG_VLM_CACHE_SIZE_MB, and how it shows its findings
READERS = [
    ["plan", "--format", "json"],
    ["plan", "--model", "qwen2.5-vl", "--format", "json"],
    ["validate", "examples/mmpool.yaml", "--format", "json"],
    ["check", "--format", "json", "--", *LAUNCH],
]


def _findings(data: dict) -> list[dict]:
    found = list(data.get("findings", []))
    for f in data.get("files", []):
        found += f["findings"]
    return found


@pytest.mark.parametrize("argv", READERS, ids=lambda a: " ".join(a[:3]))
@pytest.mark.parametrize(
    ("raw", "code", "words"),
    [
        ("abc", "env-vlm-cache-invalid", "is not an integer: SGLang only warns and uses its default 100 MiB"),
        ("-500", "env-vlm-cache-negative", "the KV reservation is SGLANG_MM_FEATURE_CACHE_MB - 500 MiB"),
    ],
)
def test_every_reader_of_the_vlm_cache_applies_one_rule(run_line, argv, raw, code, words) -> None:
    result = run_line(["mmpool", *argv], env={"SGLANG_VLM_CACHE_SIZE_MB": raw})
    found = [f for f in _findings(json.loads(result.stdout)) if f["code"] == code]
    assert len(found) == 1, [f["code"] for f in _findings(json.loads(result.stdout))]
    assert words in found[0]["message"]
    assert found[0]["severity"] == "warning"


def test_the_kv_reservation_names_the_vlm_cache_sglang_reads(run_line, tmp_path: Path) -> None:
    unset = run_line(["mmpool", "plan", "--format", "json"])
    [kv] = [f for f in json.loads(unset.stdout)["findings"] if f["code"] == "kv-reservation"]
    assert "SGLANG_VLM_CACHE_SIZE_MB (100 MiB unless set)" in kv["message"]
    shown_as = [
        ("abc", "(100 MiB: its default, the value is not an integer)"),
        ("-500", "(-500 MiB: 524 MiB in all)"),
        ("300", "(300 MiB: 1324 MiB in all)"),
    ]
    for raw, shown in shown_as:
        result = run_line(["mmpool", "plan", "--format", "json"], env={"SGLANG_VLM_CACHE_SIZE_MB": raw})
        [kv] = [f for f in json.loads(result.stdout)["findings"] if f["code"] == "kv-reservation"]
        assert f"SGLANG_VLM_CACHE_SIZE_MB {shown}" in kv["message"], kv["message"]
    config = {"model_type": "qwen2_5_vl", "hidden_size": 3584, "num_attention_heads": 28,
              "num_key_value_heads": 4, "num_hidden_layers": 28}  # fmt: skip
    (tmp_path / "config.json").write_text(json.dumps(config))
    human = run_line(["mmpool", "plan", "--model", str(tmp_path)], env={"SGLANG_VLM_CACHE_SIZE_MB": "-500"})
    assert "+ -500" not in human.stdout
    assert "[1024 - 500 MiB on every rank]" in human.stdout


def test_a_pool_size_the_environment_does_not_carry_is_a_finding(run_line, tmp_path: Path) -> None:
    config = tmp_path / "mmpool.yaml"
    config.write_text("pool:\n  size: 2GiB\n  tokenizer_workers: 2\n")
    result = run_line(["mmpool", "validate", str(config), "--format", "json"])
    found = [f for f in _findings(json.loads(result.stdout)) if f["code"] == "config-size-env-differs"]
    assert [(f["severity"], f["location"]) for f in found] == [("warning", f"{config}:2:9")]
    assert found[0]["message"] == (
        "SGLANG_MM_FEATURE_CACHE_MB is not set, so SGLang reserves its default 1024 MiB, not pool.size (2048 MiB); "
        "export SGLANG_MM_FEATURE_CACHE_MB=2048"
    )
    carried = run_line(
        ["mmpool", "validate", str(config), "--format", "json"], env={"SGLANG_MM_FEATURE_CACHE_MB": "2048"}
    )
    assert "config-size-env-differs" not in [f["code"] for f in _findings(json.loads(carried.stdout))]
    config.write_text("pool:\n  size: 1GiB\n")  # SGLang's default: nothing to carry
    same = run_line(["mmpool", "validate", str(config), "--format", "json"])
    assert "config-size-env-differs" not in [f["code"] for f in _findings(json.loads(same.stdout))]
