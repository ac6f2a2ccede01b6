"""The package builds into an sdist and a wheel that pass twine check, and the wheel runs from a
fresh virtual environment."""

from __future__ import annotations

import json
import os
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
    names = zipfile.ZipFile(wheel).namelist()
    compiled = [n for n in names if n.startswith("mmpool_cli/kernels/_fastsim.") and n.endswith(".so")]
    tag = f"cp{sys.version_info.major}{sys.version_info.minor}"
    if compiled:  # built with the compiled simulator: a wheel for this interpreter and platform
        assert wheel.name.startswith(f"mmpool-{__version__}-{tag}-{tag}-"), wheel.name
    else:  # no C compiler at hand: the same package without it (setuptools still tags it for the platform)
        assert wheel.name.startswith((f"mmpool-{__version__}-py3-none-any", f"mmpool-{__version__}-{tag}-")), wheel.name
    assert "mmpool_cli/kernels/_fastsim.pyi" in names
    assert "mmpool_cli/py.typed" in names
    assert {"mmpool_cli/cli/__init__.py", "mmpool_cli/engines/sglang/plan.py", "mmpool_cli/probe/worker.py"} <= set(
        names
    )
    assert not [n for n in names if n.startswith("tests/")]
    hook = {
        "sitecustomize.py",
        "mmpool_record/hook.py",
        "mmpool_record/recorder.py",
        "mmpool_record/recfmt.py",
        "mmpool_record/digests.json",
    }
    assert {f"mmpool_cli/_record/{n}" for n in hook} <= set(names)  # mmpool record's hook, as package data
    metadata = zipfile.ZipFile(wheel).read(f"mmpool-{__version__}.dist-info/METADATA").decode()
    assert "License-Expression: Apache-2.0" in metadata
    assert "Requires-Python: >=3.11" in metadata


def test_sdist_holds_the_compiled_simulator_source(dist: Path) -> None:
    import tarfile

    with tarfile.open(next(dist.glob("*.tar.gz"))) as sdist:
        names = {n.split("/", 1)[1] for n in sdist.getnames() if "/" in n}
    assert {"setup.py", "mmpool_cli/kernels/_fastsim.c", "mmpool_cli/kernels/_fastsim.pyi"} <= names


def test_wheel_installs_and_plans_in_a_fresh_environment(dist: Path, tmp_path: Path) -> None:
    env_dir = tmp_path / "venv"
    venv.create(env_dir, with_pip=True)
    bindir = env_dir / "bin"
    wheel = next(dist.glob("*.whl"))
    # without PYTHONPATH: a checkout on it (with the build's mmpool.egg-info) would pass for installed
    fresh = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    subprocess.run(
        [str(bindir / "pip"), "install", "--quiet", str(wheel)], check=True, capture_output=True, timeout=600, env=fresh
    )
    result = subprocess.run(
        [str(bindir / "mmpool"), "plan", "--format", "json"], capture_output=True, text=True, cwd=tmp_path, env={}
    )
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["sglang_mm_feature_cache_mb"] == 1024
    # the hints of an installed wheel name what works there: that environment's pip, no checkout's script
    probe = subprocess.run([str(bindir / "mmpool"), "probe"], capture_output=True, text=True, cwd=tmp_path, env={})
    assert probe.returncode == 3, probe.stderr
    assert f"torch is not installed: {bindir}/python" in probe.stderr  # this environment's python, as its shebang
    assert " -m pip install 'torch>=2.1' 'nvidia-ml-py>=12.535'" in probe.stderr
    assert "[probe]" not in probe.stderr
    release = subprocess.run(
        [str(bindir / "mmpool"), "plan", "--sglang-version", "0.9.1"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={},
    )
    assert release.returncode == 2
    assert "scripts/" not in release.stderr
    assert "a newer mmpool" in release.stderr
    # the console script is the entry point that makes Ctrl-C a silent 130 from its start
    assert "from mmpool_cli.entry import run" in (bindir / "mmpool").read_text()


def test_the_pipeline_page_names_the_wheel_the_build_makes(dist: Path) -> None:
    import re

    from mmpool_cli import __version__

    page = (ROOT / "docs" / "pipeline.md").read_text()
    named = re.findall(r"mmpool-[0-9.]+-([a-z0-9_]+)-([a-z0-9_]+)-([a-z0-9_]+)\.whl", page)
    wheel = next(dist.glob("*.whl")).name
    compiled = [n for n in zipfile.ZipFile(dist / wheel).namelist() if n.endswith(".so")]
    if not compiled:
        pytest.skip("built without a C compiler: a wheel without the compiled simulator")
    tag = f"cp{sys.version_info.major}{sys.version_info.minor}"
    # the page's example is CPython 3.11 on x86-64 Linux: the same form as what this build makes
    assert named and all(python == abi and python.startswith("cp") for python, abi, _ in named), named
    assert wheel.startswith(f"mmpool-{__version__}-{tag}-{tag}-"), wheel
    assert f"{__version__}" in page
