"""Every example runs, so none goes stale."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def test_plan_from_python() -> None:
    result = subprocess.run(
        [sys.executable, str(EXAMPLES / "plan_from_python.py")], capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stderr
    assert "SGLANG_MM_FEATURE_CACHE_MB=2048" in result.stdout
    assert "10 per worker, 40 per node" in result.stdout


def _mmpool(*args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in __import__("os").environ.items() if not k.startswith(("SGLANG_", "SGL_", "PYTORCH_"))}
    return subprocess.run(
        [sys.executable, "-m", "mmpool_cli", *args], capture_output=True, text=True, env=env, check=False
    )


def test_valid_examples_validate() -> None:
    result = _mmpool("validate", "--strict", str(EXAMPLES / "mmpool.yaml"), str(EXAMPLES / "sglang-config.yaml"))
    assert result.returncode == 0, result.stdout


def test_invalid_examples_fail_with_locations() -> None:
    result = _mmpool("validate", str(EXAMPLES / "invalid-mmpool.yaml"), str(EXAMPLES / "invalid-sglang-config.yaml"))
    assert result.returncode == 1
    assert "invalid-mmpool.yaml:4:3: error [config-unknown-key]" in result.stdout
    assert "invalid-sglang-config.yaml:6:1: error [sglang-config-unsupported]" in result.stdout


def test_deploy_script_uses_check_exec() -> None:
    text = (EXAMPLES / "deploy.sh").read_text()
    assert "exec mmpool check --exec --strict -- \\" in text
    assert subprocess.run(["bash", "-n", str(EXAMPLES / "deploy.sh")], check=False).returncode == 0
    # its launch command passes the check
    lines = text.split("exec mmpool check --exec --strict -- \\\n", 1)[1]
    argv = [w for w in lines.replace("\\\n", " ").split() if w]
    argv = [w.replace('"$MODEL"', "Qwen/Qwen2.5-VL-7B-Instruct") for w in argv]
    assert _mmpool("check", "--no-probe-pidfd", "--", *argv).returncode == 0


def test_ci_snippets_are_yaml_that_call_mmpool() -> None:
    import yaml

    pod = yaml.safe_load((EXAMPLES / "k8s-init-container.yaml").read_text())
    assert "mmpool validate" in pod["spec"]["initContainers"][0]["args"][0]
    assert pod["spec"]["containers"][0]["command"][:4] == ["mmpool", "check", "--exec", "--"]
    workflow = yaml.safe_load((EXAMPLES / "github-actions.yml").read_text())
    steps = " ".join(step.get("run", "") for step in workflow["jobs"]["validate"]["steps"])
    assert "mmpool validate --format github" in steps
    assert "mmpool check --format github" in steps
