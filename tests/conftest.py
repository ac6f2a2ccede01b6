"""Shared fixtures: a clean environment and a CLI runner that reads like the shell line."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from mmpool_cli.cli import app

POOL_ENV = (
    "SGLANG_MM_FEATURE_CACHE_MB",
    "SGL_MM_FEATURE_CACHE_MB",
    "SGLANG_MM_ITEM_MEM_POOL_RECYCLE_INTERVAL_SEC",
    "SGL_MM_ITEM_MEM_POOL_RECYCLE_INTERVAL_SEC",
    "SGLANG_USE_CUDA_IPC_TRANSPORT",
    "SGL_USE_CUDA_IPC_TRANSPORT",
    "PYTORCH_CUDA_ALLOC_CONF",
    "CUDA_VISIBLE_DEVICES",
    "MMPOOL_FORMAT",
    "MMPOOL_STRICT",
    "MMPOOL_QUIET",
    "MMPOOL_EXIT_ZERO",
    "SGLANG_VLM_CACHE_SIZE_MB",
    "SGL_VLM_CACHE_SIZE_MB",
    "VIDEO_MAX_PIXELS",
    "MMPOOL_SGLANG_VERSION",
    "MMPOOL_VLLM_VERSION",
    "VLLM_VIDEO_LOADER_BACKEND",
)


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--run-gpu", action="store_true", help="run the tests that need an NVIDIA GPU")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if config.getoption("--run-gpu"):
        return
    skip = pytest.mark.skip(reason="needs an NVIDIA GPU: run with --run-gpu on the GPU machine")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in POOL_ENV:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("NO_COLOR", "1")
    monkeypatch.setenv("COLUMNS", "200")


@pytest.fixture
def run_line():
    """Invoke ``mmpool ...`` through typer's runner; returns the click Result."""
    runner = CliRunner()

    def run(argv: list[str], **kwargs):
        assert argv[0] == "mmpool"
        return runner.invoke(app, argv[1:], catch_exceptions=False, **kwargs)

    return run
