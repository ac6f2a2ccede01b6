"""Shared fixtures: a clean environment and a CLI runner that reads like the shell line."""

from __future__ import annotations

import atexit
import importlib.util
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path

import pytest
from typer.testing import CliRunner

from mmpool_cli.cli import app
from mmpool_cli.kernels import native


def _compiled_simulator() -> None:
    """Give the tests this checkout's compiled simulator where the imported package has none.

    ``pip install .`` builds ``_fastsim`` into site-packages, while the tests import the checkout;
    so it is compiled here once, into a temporary folder, as ``setup.py`` builds it. Without a C
    compiler the pure-Python code is what runs (and the comparison tests skip).
    """
    if native.FAST is not None or os.environ.get("MMPOOL_PURE_PYTHON", "") not in ("", "0"):
        return
    source = Path(native.__file__).with_name("_fastsim.c")
    cc = (sysconfig.get_config_var("CC") or "cc").split()
    if not source.exists() or shutil.which(cc[0]) is None:
        return
    folder = tempfile.mkdtemp(prefix="mmpool-fastsim-")
    atexit.register(shutil.rmtree, folder, ignore_errors=True)  # once loaded, the file is no longer needed
    out = Path(folder) / f"_fastsim{sysconfig.get_config_var('EXT_SUFFIX')}"
    include = sysconfig.get_paths()["include"]
    build = [*cc, "-O2", "-std=c11", "-shared", "-fPIC", f"-I{include}", str(source), "-o", str(out)]
    if subprocess.run(build, capture_output=True, check=False).returncode != 0:
        return
    spec = importlib.util.spec_from_file_location("mmpool_cli.kernels._fastsim", out)
    if spec is None or spec.loader is None:
        return
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    sys.modules[spec.name] = module
    native.FAST = module


_compiled_simulator()

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
