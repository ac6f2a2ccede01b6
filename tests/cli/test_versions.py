"""`--sglang-version` on plan, check and validate: each release's own split and too-small decision."""

from __future__ import annotations

import json

import pytest

from mmpool_cli.engines.sglang import versions

MiB = 1024 * 1024
RELEASES = versions.known()
ORDER = {v: i for i, v in enumerate(RELEASES)}


def _per_worker_16(version: str) -> int:
    # 16 workers and SGLang's default budget, as each wheel splits it
    if ORDER[version] < ORDER["0.5.11"]:
        return 4096 * MiB  # 0.5.10: no split, every worker allocates the whole 4 GiB default
    if ORDER[version] < ORDER["0.5.16"]:
        return 128 * MiB  # max(1024 MiB // 16, 128 MiB)
    return 64 * MiB  # 1024 MiB // 16


@pytest.mark.parametrize("version", RELEASES)
def test_plan_splits_as_the_release_does(run_line, version: str) -> None:
    result = run_line(["mmpool", "plan", "--sglang-version", version, "--workers", "16", "--format", "json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["sglang_version"] == version
    assert data["sglang_version_chosen"] == "--sglang-version"
    assert data["per_worker_bytes"] == _per_worker_16(version)
    codes = {f["code"] for f in data["findings"]}
    assert ("no-split" in codes) is (ORDER[version] < ORDER["0.5.11"])
    assert ("split-floor" in codes) is (ORDER["0.5.11"] <= ORDER[version] < ORDER["0.5.16"])


@pytest.mark.parametrize("version", RELEASES)
def test_plan_too_small_only_with_a_control_header(run_line, version: str) -> None:
    # 1 MiB over 16 workers: 65 536 bytes each, less than the 147 456-byte header of 8 consumers
    argv = ["mmpool", "plan", "--sglang-version", version, "--size", "1MiB", "--workers", "16", "--tp", "8"]
    result = run_line([*argv, "--format", "json"])
    data = json.loads(result.stdout)
    codes = {f["code"] for f in data["findings"]}
    if ORDER[version] >= ORDER["0.5.18"]:
        assert result.exit_code == 1
        assert data["header_bytes"] == 4096 * 9 * 4 and "pool-too-small" in codes
    else:
        assert result.exit_code == 0, result.output
        assert data["header_bytes"] == 0 and "pool-too-small" not in codes
        expected = {True: 1 * MiB, False: 128 * MiB if ORDER[version] < ORDER["0.5.16"] else MiB // 16}
        assert data["per_worker_bytes"] == expected[ORDER[version] < ORDER["0.5.11"]]


def test_attention_dp_consumers_from_0_5_22(run_line) -> None:
    def consumers(version: str, *flags: str) -> dict:
        result = run_line(["mmpool", "plan", "--sglang-version", version, "--tp", "8", *flags, "--format", "json"])
        return json.loads(result.stdout)

    assert consumers("0.5.23", "--dp", "4", "--enable-dp-attention")["consumers"] == 2
    assert consumers("0.5.22", "--attn-dp-size", "4")["consumers"] == 2
    old = consumers("0.5.21", "--dp", "4", "--enable-dp-attention")
    assert old["consumers"] == 8
    assert "--enable-dp-attention" in old["settings"]["args"]
    refused = consumers("0.5.21", "--attn-dp-size", "4")
    assert refused["status"] == "fail"
    assert any("has no --attn-dp-size" in f["message"] for f in refused["findings"])


def test_env_era_settings_use_the_environment(run_line) -> None:
    data = json.loads(run_line(["mmpool", "plan", "--sglang-version", "0.5.13", "--format", "json"]).stdout)
    assert data["settings"]["env"] == {"SGLANG_MM_FEATURE_CACHE_MB": "1024", "SGLANG_USE_CUDA_IPC_TRANSPORT": "1"}
    assert "--mm-feature-transport" not in data["settings"]["args"]
    vmm = run_line(["mmpool", "plan", "--sglang-version", "0.5.17", "--transport", "cuda_vmm", "--format", "json"])
    assert vmm.exit_code == 1
    assert "SGLang 0.5.17 has no cuda_vmm transport" in vmm.stdout


def test_unknown_version_one_line_exit_2(run_line) -> None:
    result = run_line(["mmpool", "plan", "--sglang-version", "0.4.0"])
    assert result.exit_code == 2
    assert result.stderr.count("\n") == 1
    assert "pick one of 0.5.10, " in result.stderr and "0.5.23" in result.stderr


def test_env_twin_and_how_it_was_chosen(run_line, monkeypatch) -> None:
    monkeypatch.setenv("MMPOOL_SGLANG_VERSION", "0.5.16")
    data = json.loads(run_line(["mmpool", "plan", "--format", "json"]).stdout)
    assert (data["sglang_version"], data["sglang_version_chosen"]) == ("0.5.16", "MMPOOL_SGLANG_VERSION")
    human = run_line(["mmpool", "plan"]).stdout
    assert "SGLang 0.5.16 (from MMPOOL_SGLANG_VERSION)" in human


def test_check_refuses_a_flag_the_release_lacks(run_line) -> None:
    launch = ["--", "python", "-m", "sglang.launch_server", "--model-path", "m", "--keep-mm-feature-on-device"]
    new = run_line(["mmpool", "check", "--sglang-version", "0.5.23", "--format", "json", *launch])
    assert new.exit_code == 1
    data = json.loads(new.stdout)
    assert data["sglang_version"] == "0.5.23"
    assert any("was removed after 0.5.20" in f["message"] for f in data["files"][0]["findings"])
    old = run_line(["mmpool", "check", "--sglang-version", "0.5.20", "--format", "json", *launch])
    assert old.exit_code == 0, old.output
    data = json.loads(old.stdout)
    assert data["files"][0]["transport"] == "cuda_ipc"
    assert any(f["code"] == "keep-on-device-deprecated" for f in data["files"][0]["findings"])


def test_check_0_5_17_picks_cuda_ipc_itself(run_line) -> None:
    launch = ["--", "python", "-m", "sglang.launch_server", "--model-path", "m"]
    data = json.loads(run_line(["mmpool", "check", "--sglang-version", "0.5.17", "--format", "json", *launch]).stdout)
    assert data["files"][0]["transport"] == "cuda_ipc"
    data = json.loads(run_line(["mmpool", "check", "--sglang-version", "0.5.18", "--format", "json", *launch]).stdout)
    assert data["files"][0]["transport"] == "cpu"


def test_validate_reads_a_config_with_the_release_flags(run_line, tmp_path) -> None:
    cfg = tmp_path / "sglang.yaml"
    cfg.write_text("model-path: m\nattn-dp-size: 2\ntp-size: 4\nmm-feature-transport: cuda_ipc\n")
    old = run_line(["mmpool", "validate", "--sglang-version", "0.5.21", "--format", "json", str(cfg)])
    assert old.exit_code == 1
    data = json.loads(old.stdout)
    assert data["sglang_version"] == "0.5.21"
    assert any("is new in 0.5.22" in f["message"] for r in data["files"] for f in r["findings"])
    new = run_line(["mmpool", "validate", "--sglang-version", "0.5.23", "--format", "json", str(cfg)])
    assert new.exit_code == 0, new.output
    plans = [r["plan"] for r in json.loads(new.stdout)["files"] if r["plan"] is not None]
    assert plans and all(p["sglang_version_chosen"] == "--sglang-version" for p in plans)


def test_probe_refuses_an_unknown_version_before_touching_a_gpu(run_line) -> None:
    result = run_line(["mmpool", "probe", "--sglang-version", "0.5.9", "--format", "json"])
    assert result.exit_code == 2
    assert "SGLang '0.5.9' is not a release mmpool knows" in result.stderr
