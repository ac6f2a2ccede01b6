"""The engine registry and interface: one entry per engine, each a complete Engine."""

from __future__ import annotations

import inspect

import pytest

from mmpool_cli.engines import REGISTRY, engine, names
from mmpool_cli.engines.interface import Engine
from mmpool_cli.workload.families import FAMILIES


def test_the_registry_names_sglang_first_and_each_entry_is_an_engine() -> None:
    assert names()[0] == "sglang"
    for name in names():
        eng = engine(name)
        assert isinstance(eng, Engine)
        assert eng.name == name
        assert not inspect.isabstract(type(eng))


def test_an_unknown_engine_is_a_key_error() -> None:
    assert "nosuch" not in REGISTRY
    with pytest.raises(KeyError):
        engine("nosuch")


def test_sglang_knows_its_releases_and_allocators() -> None:
    eng = engine("sglang")
    releases = eng.releases()
    assert releases == tuple(sorted(releases, key=lambda v: [int(p.removeprefix("post")) for p in v.split(".")]))
    assert eng.choose_release(None, {})[0] == releases[-1]
    assert eng.choose_release(releases[0], {}) == (releases[0], "--sglang-version")
    assert eng.allocators(releases[-1]) == ("cuda_ipc", "cuda_vmm")
    assert eng.allocators(releases[0]) == ("cuda_ipc",)


def test_sglang_says_which_families_are_pooled() -> None:
    eng = engine("sglang")
    pooled = {name for name in FAMILIES if eng.pooled(name)}
    assert pooled == {"qwen2-vl", "qwen2.5-vl", "qwen3-vl", "gemma3", "llama4", "kimi-k2.5"}
    assert not eng.pooled("internvl")


def test_sglang_says_which_releases_the_simulator_replays() -> None:
    eng = engine("sglang")
    newest, oldest = eng.releases()[-1], eng.releases()[0]
    assert eng.simulation_refusal(newest, "cuda_ipc") is None
    assert "cuda_ipc only" in (eng.simulation_refusal(newest, "cuda_vmm") or "")
    refusal = eng.simulation_refusal(oldest, "cuda_ipc") or ""
    assert "shm-counter pool" in refusal and f"SGLang {oldest} " in refusal
