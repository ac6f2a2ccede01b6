"""Which vLLM release applies: the flag, the environment, the installed vllm's metadata, the newest."""

from __future__ import annotations

import sys

import pytest

from mmpool_cli.engines.vllm import versions
from mmpool_cli.errors import MmpoolError


def _install(tmp_path, monkeypatch, version: str) -> None:
    info = tmp_path / f"vllm-{version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: vllm\nVersion: {version}\n")
    monkeypatch.setattr(sys, "path", [str(tmp_path), *sys.path])


def test_the_tables_hold_0_30_to_0_34_and_newest_is_the_last():
    assert versions.known() == ("0.30.0", "0.31.0", "0.32.0", "0.33.0", "0.34.0")
    assert versions.known()[-1] == versions.NEWEST


def test_the_installed_vllm_is_read_from_its_metadata_never_imported(tmp_path, monkeypatch):
    _install(tmp_path, monkeypatch, "0.32.0")
    release, chosen = versions.choose(None, {})
    assert (release.version, chosen) == ("0.32.0", "installed")
    assert "vllm" not in sys.modules
    assert versions.choose("0.31.0", {})[1] == "--vllm-version"
    assert versions.choose(None, {"MMPOOL_VLLM_VERSION": "0.30.0"})[0].version == "0.30.0"


def test_an_installed_release_mmpool_does_not_know_is_a_usage_error(tmp_path, monkeypatch):
    _install(tmp_path, monkeypatch, "0.99.0")
    with pytest.raises(MmpoolError, match="the installed vllm '0.99.0' is not a release mmpool knows"):
        versions.choose(None, {})


def test_without_vllm_the_newest_applies():
    assert versions.installed_version() is None
    assert versions.choose(None, {}) == (versions.release(versions.NEWEST), "newest")


def test_release_rules_differ_where_the_source_does():
    assert versions.release("0.31.0").shm_extra_bytes == 0
    assert versions.release("0.32.0").shm_extra_bytes == 32
    assert versions.release("0.34.0").at["gpu_decode_pool"] == "multimodal/gpu_ipc_memory.py:142"
