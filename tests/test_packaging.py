"""The package builds into an sdist and a wheel that pass twine check, and the wheel runs from a
fresh virtual environment."""

from __future__ import annotations

import json
import subprocess
import sys
import venv
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def dist(tmp_path_factory: pytest.TempPathFactory) -> Path:
    pytest.importorskip("build")
    out = tmp_path_factory.mktemp("dist")
    subprocess.run(
        [sys.executable, "-m", "build", "--outdir", str(out), str(ROOT)], check=True, capture_output=True, timeout=600
    )
    return out


def test_sdist_and_wheel_pass_twine_check(dist: Path) -> None:
    pytest.importorskip("twine")
    files = sorted(str(p) for p in dist.iterdir())
    assert sorted(Path(f).suffix for f in files) == [".gz", ".whl"]
    result = subprocess.run(
        [sys.executable, "-m", "twine", "check", "--strict", *files], capture_output=True, text=True
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_wheel_holds_the_package_and_its_metadata(dist: Path) -> None:
    from mmpool_cli import __version__

    wheel = next(dist.glob("*.whl"))
    assert wheel.name == f"mmpool-{__version__}-py3-none-any.whl"
    names = zipfile.ZipFile(wheel).namelist()
    assert "mmpool_cli/py.typed" in names
    assert {"mmpool_cli/cli/__init__.py", "mmpool_cli/engines/sglang/plan.py", "mmpool_cli/probe/worker.py"} <= set(names)
    assert not [n for n in names if n.startswith("tests/")]
    metadata = zipfile.ZipFile(wheel).read(f"mmpool-{__version__}.dist-info/METADATA").decode()
    assert "License-Expression: Apache-2.0" in metadata
    assert "Requires-Python: >=3.11" in metadata


def test_wheel_installs_and_plans_in_a_fresh_environment(dist: Path, tmp_path: Path) -> None:
    env_dir = tmp_path / "venv"
    venv.create(env_dir, with_pip=True)
    bindir = env_dir / "bin"
    wheel = next(dist.glob("*.whl"))
    subprocess.run(
        [str(bindir / "pip"), "install", "--quiet", str(wheel)], check=True, capture_output=True, timeout=600
    )
    result = subprocess.run(
        [str(bindir / "mmpool"), "plan", "--format", "json"], capture_output=True, text=True, cwd=tmp_path, env={}
    )
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["sglang_mm_feature_cache_mb"] == 1024
