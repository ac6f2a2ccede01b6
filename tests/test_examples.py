"""Every example runs, so none goes stale."""

from __future__ import annotations

import json
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


def _shell_env(tmp_path: Path) -> dict[str, str]:
    """PATH with this environment's mmpool first, and a stand-in ``sglang`` package and command."""
    import os
    import shutil

    stand_in = tmp_path / "stand-in"
    (stand_in / "sglang").mkdir(parents=True)
    (stand_in / "sglang" / "__init__.py").write_text("")
    launch = "import sys\nprint('sglang stand-in:', ' '.join(sys.argv[1:]))\n"
    (stand_in / "sglang" / "launch_server.py").write_text(launch)
    script = stand_in / "bin" / "sglang"
    script.parent.mkdir()
    script.write_text(f"#!{sys.executable}\nimport sys\nprint('sglang stand-in:', ' '.join(sys.argv[1:]))\n")
    script.chmod(0o755)
    mmpool = shutil.which("mmpool") or str(Path(sys.executable).parent / "mmpool")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SGLANG_", "SGL_", "PYTORCH_", "MMPOOL_"))}
    bins = [str(script.parent), str(Path(mmpool).parent), str(Path(sys.executable).parent)]
    env["PATH"] = os.pathsep.join([*bins, env.get("PATH", "")])
    env["PYTHONPATH"] = str(stand_in)
    return env


def test_deploy_script_checks_then_execs_the_launch(tmp_path: Path) -> None:
    result = subprocess.run(
        ["bash", str(EXAMPLES / "deploy.sh")], capture_output=True, text=True, env=_shell_env(tmp_path), check=False
    )
    assert result.returncode == 0, result.stderr
    # the check's report went to stderr; stdout belongs to the launched server
    assert "mmpool check: OK" in result.stderr
    assert result.stdout.startswith("sglang stand-in: --model-path Qwen/Qwen2.5-VL-7B-Instruct --tp-size 8")


def _deploy_dir(tmp_path: Path) -> Path:
    deploy = tmp_path / "repo" / "deploy"
    deploy.mkdir(parents=True)
    (deploy / "pool.env").write_text("SGLANG_MM_FEATURE_CACHE_MB=1024\n")
    (deploy / "sglang.yaml").write_text((EXAMPLES / "sglang-config.yaml").read_text())
    (deploy / "mmpool.yaml").write_text((EXAMPLES / "mmpool.yaml").read_text())
    return deploy.parent


def test_github_actions_steps_run(tmp_path: Path) -> None:
    import yaml

    workflow = yaml.safe_load((EXAMPLES / "github-actions.yml").read_text())
    steps = [s["run"] for s in workflow["jobs"]["validate"]["steps"] if "run" in s and "pip install" not in s["run"]]
    assert len(steps) == 3
    repo, env = _deploy_dir(tmp_path), _shell_env(tmp_path)
    for step in steps:
        result = subprocess.run(["bash", "-c", step], cwd=repo, capture_output=True, text=True, env=env, check=False)
        assert result.returncode == 0, (step, result.stdout, result.stderr)
    sarif = json.loads((repo / "mmpool.sarif").read_text())
    assert sarif["version"] == "2.1.0"


def test_k8s_init_container_checks_what_the_main_container_runs(tmp_path: Path) -> None:
    import yaml

    pod = yaml.safe_load((EXAMPLES / "k8s-init-container.yaml").read_text())
    init, main = pod["spec"]["initContainers"][0], pod["spec"]["containers"][0]
    script = init["args"][0]
    install, _, check = script.partition("&&")
    assert install.strip() == 'pip install --quiet "$MMPOOL_SPEC"'
    # the main container needs no mmpool, and runs exactly the launch the init container checked
    assert "mmpool" not in " ".join(main["command"])
    assert check.split(" -- ", 1)[1].split() == main["command"]
    config = tmp_path / "config.yaml"
    config.write_text((EXAMPLES / "sglang-config.yaml").read_text())
    env = _shell_env(tmp_path) | {e["name"]: e["value"] for e in init["env"]}
    result = subprocess.run(
        ["sh", "-c", check.replace("/etc/sglang/config.yaml", str(config))],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert main["env"] == [e for e in init["env"] if e["name"] == "SGLANG_MM_FEATURE_CACHE_MB"]


def test_simulate_example_trace() -> None:
    trace = str(EXAMPLES / "trace.jsonl")
    result = _mmpool("simulate", "--trace", trace, "--size", "128MiB", "--workers", "2", "--tp", "2")
    assert result.returncode == 1, result.stderr
    assert "by items         1 of 3 (33.33%)" in result.stdout
    result = _mmpool("simulate", "--trace", trace, "--workers", "2", "--tp", "2", "--smallest-budget")
    assert "export SGLANG_MM_FEATURE_CACHE_MB=141\n" in result.stdout


def test_simulate_readme_qwen_example() -> None:
    images = ["--image", "1920x1080"] * 4
    common = ["simulate", "--model", "qwen2.5-vl", *images, "--concurrency", "32", "--duration", "2"]
    common += ["--residency", "exponential", "--ack-delay", "0.05", "--smallest-budget"]
    result = _mmpool(*common, "--target-fallback", "0.01")
    assert "by items         26 of 4000 (0.65%)" in result.stdout
    assert "export SGLANG_MM_FEATURE_CACHE_MB=966\n" in result.stdout
    assert "export SGLANG_MM_FEATURE_CACHE_MB=1353\n" in _mmpool(*common).stdout
    # the clients starting together: the README's worst case
    burst = _mmpool(*common, "--target-fallback", "0.01", "--burst")
    assert "by items         132 of 4000 (3.30%)" in burst.stdout
    assert "export SGLANG_MM_FEATURE_CACHE_MB=4250\n" in burst.stdout


def test_readme_walkthrough_from_a_server_log(tmp_path: Path) -> None:
    log = Path(__file__).resolve().parent / "engines/sglang/traffic/data/sglang-0.5.23/server-json-level2.log"
    (tmp_path / "server.log").write_text(log.read_text())
    env = {k: v for k, v in __import__("os").environ.items() if not k.startswith(("SGLANG_", "SGL_", "PYTORCH_"))}
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "mmpool_cli",
            "simulate",
            "--model",
            "qwen2.5-vl",
            "--from",
            "server.log",
            "--smallest-budget",
        ],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert "mmpool trace: 7 requests, 12 items, 12 allocs, 75,075,840 B from server.log (auto)" in result.stderr
    assert "peak  26.79 MiB (2.62%), 3 leases in flight" in result.stdout
    assert "export SGLANG_MM_FEATURE_CACHE_MB=27\n" in result.stdout
