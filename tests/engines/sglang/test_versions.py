"""Each SGLang release's pool rules, checked against what its own source does (read in each wheel).

The expectations here are written from the wheels' code, not from ``data/releases.json``: a
regenerated table that changes a rule fails these tests.
"""

from __future__ import annotations

import json

import pytest

from mmpool_cli.engines.sglang import versions
from mmpool_cli.errors import MmpoolError

MiB = 1024 * 1024

# What each release does, from its wheel: the budget's default (environ.py), the split
# (multimodal/processors/base_processor.py), the pool class (shm counters or the stream-ordered
# pool with a control header), the pool's device, the transport flag's choices and default.
EXPECTED = {
    "0.5.10": (4096, "none", False, False, ("cpu", "cuda_ipc"), "env"),
    "0.5.10.post1": (4096, "none", False, False, ("cpu", "cuda_ipc"), "env"),
    "0.5.11": (1024, "floor", False, False, ("cpu", "cuda_ipc"), "env"),
    "0.5.12": (1024, "floor", False, False, ("cpu", "cuda_ipc"), "env"),
    "0.5.12.post1": (1024, "floor", False, False, ("cpu", "cuda_ipc"), "env"),
    "0.5.13": (1024, "floor", False, False, ("cpu", "cuda_ipc"), "env"),
    "0.5.13.post1": (1024, "floor", False, False, ("cpu", "cuda_ipc"), "env"),
    "0.5.14": (1024, "floor", False, True, ("cpu", "cuda_ipc"), "env"),
    "0.5.15": (1024, "floor", False, True, ("cpu", "cuda_ipc"), "env"),
    "0.5.15.post1": (1024, "floor", False, True, ("cpu", "cuda_ipc"), "env"),
    "0.5.16": (1024, "exact", False, True, ("cpu", "cuda_ipc"), "opt-in"),
    "0.5.17": (1024, "exact", False, True, ("cpu", "cuda_ipc"), "auto-cuda_ipc-single-node"),
    "0.5.18": (1024, "exact", True, True, ("cpu", "cuda_ipc", "cuda_vmm"), "cpu-single-node"),
    "0.5.19": (1024, "exact", True, True, ("cpu", "cuda_ipc", "cuda_vmm"), "cpu-single-node"),
    "0.5.20": (1024, "exact", True, True, ("cpu", "cuda_ipc", "cuda_vmm"), "cpu-single-node"),
    "0.5.21": (1024, "exact", True, True, ("cpu", "cuda_ipc", "cuda_vmm"), "cpu-single-node"),
    "0.5.22": (1024, "exact", True, True, ("cpu", "cuda_ipc", "cuda_vmm"), "cpu-single-node"),
    "0.5.23": (1024, "exact", True, True, ("cpu", "cuda_ipc", "cuda_vmm"), "cpu-single-node"),
}


def test_the_table_holds_every_release_from_0_5_10_to_0_5_23() -> None:
    assert versions.known() == tuple(EXPECTED)
    assert versions.known()[-1] == versions.NEWEST


@pytest.mark.parametrize("version", list(EXPECTED))
def test_release_rules_match_its_source(version: str) -> None:
    rel = versions.release(version)
    default_mb, split, stream_ordered, on_base_gpu, transports, policy = EXPECTED[version]
    assert rel.default_budget_mb == default_mb
    assert rel.split == split
    assert rel.floor_bytes == (128 * MiB if split == "floor" else 0)
    assert rel.stream_ordered is stream_ordered
    assert rel.on_base_gpu is on_base_gpu
    assert rel.transports == transports
    assert rel.default_policy == policy
    # the KV reservation and the stream-ordered pool came together (0.5.18); attention-DP
    # consumers, the positional-embeds pool and --attn-dp-size in 0.5.22
    assert rel.kv_reserves == (("cuda_ipc", "cuda_vmm") if stream_ordered else ())
    late = versions.known().index(version) >= versions.known().index("0.5.22")
    assert rel.attn_dp_consumers is late
    assert rel.positional_pool is late
    assert rel.has("--attn-dp-size") is late
    # --keep-mm-feature-on-device: a device-residency switch up to 0.5.15, cuda_ipc's alias 0.5.16-0.5.20
    assert rel.has("--keep-mm-feature-on-device") is (
        versions.known().index(version) <= versions.known().index("0.5.20")
    )
    assert rel.qwen3_vl_override is (versions.known().index(version) >= versions.known().index("0.5.20"))


def test_split_per_release() -> None:
    budget = 1024 * MiB
    assert versions.release("0.5.10").per_worker(4096 * MiB, 16) == 4096 * MiB
    assert versions.release("0.5.13").per_worker(budget, 16) == 128 * MiB  # max(64 MiB, 128 MiB)
    assert versions.release("0.5.13").per_worker(budget, 4) == 256 * MiB
    assert versions.release("0.5.16").per_worker(budget, 16) == 64 * MiB
    assert versions.release("0.5.23").per_worker(budget + 5, 4) == (budget + 5) // 4


def test_header_slice_and_fit_per_pool_class() -> None:
    shm, stream = versions.release("0.5.17"), versions.release("0.5.18")
    assert shm.header_bytes(8) == 0
    assert shm.slice_bytes(1001) == 1001  # the shm pool does not align
    assert shm.fit(1 << 30, 256) == (1 << 30) // 256  # and has no slot cap
    assert stream.header_bytes(8) == 4096 * 9 * 4
    assert stream.slice_bytes(1001) == 1024
    assert stream.fit(1 << 30, 256) == 4096


def test_unknown_version_is_a_usage_error_naming_the_range() -> None:
    with pytest.raises(MmpoolError, match=r"'0\.5\.9' is not a release mmpool knows: pick one of 0\.5\.10, .*0\.5\.23"):
        versions.release("0.5.9")


def test_choose_flag_then_env_then_installed_then_newest(tmp_path, monkeypatch) -> None:
    monkeypatch.setattr("sys.path", [str(tmp_path)])
    assert versions.choose(None, {}) == (versions.release(versions.NEWEST), "newest")
    dist = tmp_path / "sglang-0.5.16.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: sglang\nVersion: 0.5.16\n")
    assert versions.installed_version() == "0.5.16"
    assert versions.choose(None, {}) == (versions.release("0.5.16"), "installed")
    env = {versions.ENV_VERSION: "0.5.13"}
    assert versions.choose(None, env) == (versions.release("0.5.13"), "MMPOOL_SGLANG_VERSION")
    assert versions.choose("0.5.20", env) == (versions.release("0.5.20"), "--sglang-version")
    with pytest.raises(MmpoolError, match="MMPOOL_SGLANG_VERSION: SGLang '1.0' is not a release"):
        versions.choose(None, {versions.ENV_VERSION: "1.0"})


def test_an_installed_unknown_release_asks_for_the_flag(tmp_path, monkeypatch) -> None:
    monkeypatch.setattr("sys.path", [str(tmp_path)])
    dist = tmp_path / "sglang-0.4.6.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: sglang\nVersion: 0.4.6\n")
    with pytest.raises(MmpoolError, match="installed sglang .0.4.6. is not a release mmpool knows .*--sglang-version"):
        versions.choose(None, {})


def test_releases_json_names_its_generator_and_wheels() -> None:
    data = json.loads((versions.DATA_DIR / "releases.json").read_text())
    assert data["generator"] == "scripts/gen_sglang_tables.py"
    assert data["versions"] == list(versions.known())
    # a rule with its source: the split of 0.5.23 was read from cuda_ipc.py
    newest = data["releases"][-1]
    assert newest["split_at"].startswith("multimodal/transport/cuda_ipc.py:")


def test_a_hostile_version_string_stays_one_short_line() -> None:
    with pytest.raises(MmpoolError) as info:
        versions.release("0.5.2\n" + "x" * 100_000)
    message = str(info.value)
    assert "\n" not in message and len(message) < 500
