"""What pipelines lean on: environment twins, --quiet, --exit-zero, directories, the pre-commit hook."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from mmpool_cli.usecases.validate import CONFIG_NAME

ROOT = Path(__file__).resolve().parents[2]
INVALID = ROOT / "tests" / "data" / "configs" / "invalid"


def test_format_and_strict_from_the_environment(run_line, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MMPOOL_FORMAT", "json")
    result = run_line(["mmpool", "validate", str(INVALID / "mmpool-never-fits.yaml")])
    assert json.loads(result.stdout)["status"] == "ok"
    monkeypatch.setenv("MMPOOL_STRICT", "1")
    result = run_line(["mmpool", "validate", str(INVALID / "mmpool-never-fits.yaml")])
    assert result.exit_code == 1
    assert json.loads(result.stdout)["strict"] is True
    # a flag still wins over its twin
    result = run_line(["mmpool", "validate", "--format", "human", str(INVALID / "mmpool-never-fits.yaml")])
    assert result.stdout.startswith("environment")


def test_env_twins_are_listed_in_help(run_line) -> None:
    out = " ".join(run_line(["mmpool", "validate", "--help"]).stdout.split())
    for name in ("MMPOOL_FORMAT", "MMPOOL_STRICT", "MMPOOL_QUIET", "MMPOOL_EXIT_ZERO"):
        assert f"env var: {name}" in out


def test_quiet_prints_only_the_problems(run_line, tmp_path: Path) -> None:
    result = run_line(["mmpool", "validate", "-q", str(INVALID / "mmpool-typos.yaml")])
    lines = result.stdout.splitlines()
    assert result.exit_code == 1
    assert len(lines) == 3
    assert all(re.match(r".*mmpool-typos\.yaml:\d+:\d+: error \[config-", line) for line in lines)
    good = tmp_path / "mmpool.yaml"
    good.write_text("pool:\n  size: 1GiB\n")
    quiet_ok = run_line(["mmpool", "validate", "--quiet", str(good)])
    assert (quiet_ok.exit_code, quiet_ok.stdout) == (0, "")


def test_exit_zero(run_line) -> None:
    result = run_line(["mmpool", "validate", "--exit-zero", str(INVALID / "mmpool-typos.yaml")])
    assert result.exit_code == 0
    assert "config-unknown-key" in result.stdout
    check = run_line(["mmpool", "check", "--exit-zero", "--", "python", "-m", "sglang.launch_server", "--bogus"])
    assert check.exit_code == 0
    refused = run_line(["mmpool", "check", "--exec", "--exit-zero", "--", "sglang", "serve", "M"])
    assert refused.exit_code == 2
    assert "drop --exit-zero" in refused.stderr


def test_directory_checks_its_config_files(run_line, tmp_path: Path) -> None:
    (tmp_path / "deploy").mkdir()
    (tmp_path / ".git").mkdir()
    (tmp_path / "deploy" / "sglang.yaml").write_text("mm-feature-transport: cuda_ipc\ntp-size: 0\n")
    (tmp_path / "deploy" / "mmpool-prod.yml").write_text("pool:\n  size: 1GiB\n")
    (tmp_path / "deploy" / "k8s.yaml").write_text("kind: Pod\n")  # not a config: left alone
    (tmp_path / ".git" / "sglang.yaml").write_text("bogus: 1\n")  # hidden: skipped
    result = run_line(["mmpool", "validate", "--format", "json", str(tmp_path)])
    paths = [f["path"] for f in json.loads(result.stdout)["files"]]
    assert paths == [
        "environment",
        str(tmp_path / "deploy" / "mmpool-prod.yml"),
        str(tmp_path / "deploy" / "sglang.yaml"),
    ]
    assert result.exit_code == 1
    empty = tmp_path / "empty"
    empty.mkdir()
    none = run_line(["mmpool", "validate", "--format", "json", str(empty)])
    assert none.exit_code == 1
    assert json.loads(none.stdout)["files"][1]["findings"][0]["code"] == "directory-no-configs"


def test_the_hook_and_directories_pick_the_same_files() -> None:
    hook = yaml.safe_load((ROOT / ".pre-commit-hooks.yaml").read_text())[0]
    pattern = re.compile(hook["files"])
    for name in ["mmpool.yaml", "sglang-prod.yml", "mmpool.json", "k8s.yaml", "my-sglang.yaml", "sglang.yaml.bak"]:
        assert bool(pattern.search(f"deploy/{name}")) is bool(CONFIG_NAME.fullmatch(name)), name


@pytest.mark.skipif(shutil.which("git") is None, reason="pre-commit needs git")
def test_pre_commit_hook_runs_on_a_sample_repository(tmp_path: Path) -> None:
    pytest.importorskip("pre_commit")
    repo = tmp_path / "sample"
    repo.mkdir()
    env = {**os.environ, "PRE_COMMIT_HOME": str(tmp_path / "cache"), "GIT_CONFIG_GLOBAL": os.devnull}

    def git(*args: str) -> None:
        subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True, env=env)

    git("init", "-q")
    (repo / "sglang.yaml").write_text("model-path: M\nmm-feature-transport: cuda_ipc\nnnodes: 2\n")
    (repo / "notes.yaml").write_text("anything: 1\n")
    git("add", ".")
    result = subprocess.run(
        [sys.executable, "-m", "pre_commit", "try-repo", str(ROOT), "mmpool-validate", "--all-files"],
        cwd=repo,
        capture_output=True,
        text=True,
        env=env,
        check=False,
        timeout=600,
    )
    assert result.returncode == 1, result.stdout + result.stderr
    assert re.search(r"sglang\.yaml:\d+:\d+: error \[transport-layout\]", result.stdout), result.stdout
    assert "notes.yaml" not in result.stdout
