"""Hints name commands that work from where mmpool runs: this interpreter's pip, the checkout if any."""

from __future__ import annotations

import shlex
import sys
import tomllib
from pathlib import Path

import pytest

from mmpool_cli.core import origin
from mmpool_cli.engines.sglang import versions
from mmpool_cli.errors import MmpoolError

ROOT = Path(__file__).resolve().parents[2]


def test_probe_requirements_are_the_probe_extra() -> None:
    extra = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]["probe"]
    assert list(origin.PROBE_REQUIREMENTS) == extra


def test_from_this_checkout_the_hint_names_this_python_and_the_checkout() -> None:
    assert origin.checkout() == ROOT
    hint = origin.probe_install_hint()
    assert hint.startswith(shlex.join([sys.executable, "-m", "pip", "install", "torch>=2.1", "nvidia-ml-py>=12.535"]))
    assert shlex.join([sys.executable, "-m", "pip", "install", "-e", f"{ROOT}[probe]"]) in hint
    # no bare requirement that would install whatever the package index calls mmpool (a checkout's
    # own path may end in /mmpool: that one is a path)
    assert not any(word.startswith("mmpool[") for word in shlex.split(hint))


def test_an_installed_wheel_gets_the_requirements_alone(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(origin, "PACKAGE_DIR", tmp_path / "site-packages" / "mmpool_cli")
    assert origin.checkout() is None
    assert origin.probe_install_hint() == shlex.join(
        [sys.executable, "-m", "pip", "install", *origin.PROBE_REQUIREMENTS]
    )


def test_another_projects_checkout_is_not_mmpools(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "other"\n')
    monkeypatch.setattr(origin, "PACKAGE_DIR", tmp_path / "mmpool_cli")
    assert origin.checkout() is None


def test_unknown_release_names_the_generator_only_in_a_checkout(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    monkeypatch.chdir(tmp_path)  # outside the checkout: its absolute path
    with pytest.raises(MmpoolError) as here:
        versions.release("0.9.1")
    assert str(ROOT / "scripts" / "gen_sglang_tables.py") in str(here.value)
    monkeypatch.chdir(ROOT)  # inside the checkout, the path as typed from there
    with pytest.raises(MmpoolError) as inside:
        versions.release("0.9.1")
    assert "(scripts/gen_sglang_tables.py adds newer ones)" in str(inside.value)
    monkeypatch.setattr(origin, "PACKAGE_DIR", tmp_path / "site-packages" / "mmpool_cli")
    with pytest.raises(MmpoolError) as installed:
        versions.release("0.9.1")
    assert "scripts/" not in str(installed.value)
    assert "a newer mmpool" in str(installed.value)
