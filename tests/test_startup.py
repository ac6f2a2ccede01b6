"""The CLI starts without torch or NVML, and the installed `mmpool` works in a subprocess."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest


def test_plan_never_imports_torch_or_nvml() -> None:
    code = (
        "import sys\n"
        "from mmpool_cli.cli import main\n"
        "rc = main(['plan', '--format', 'json'])\n"
        "heavy = sorted(m for m in ('torch', 'pynvml', 'matplotlib', 'msgspec') if m in sys.modules)\n"
        "assert not heavy, heavy\n"
        "sys.exit(rc)\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr


def test_a_run_of_one_command_imports_only_its_module() -> None:
    code = (
        "import sys\n"
        "sys.argv = ['mmpool', 'simulate', '--help']\n"
        "from mmpool_cli import entry\n"
        "try:\n"
        "    entry.run()\n"
        "except SystemExit:\n"
        "    pass\n"
        "loaded = sorted(m for m in sys.modules if m.startswith('mmpool_cli.cli.') and m.rsplit('.', 1)[1] in\n"
        "    ('check', 'plan', 'probe', 'schema', 'simulate', 'trace', 'validate'))\n"
        "print(' '.join(loaded), file=sys.stderr)\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert result.stderr.split() == ["mmpool_cli.cli.simulate"], result.stderr
    assert "Usage: mmpool simulate" in result.stdout


def test_help_and_unknown_words_register_every_command() -> None:
    listed = subprocess.run([sys.executable, "-m", "mmpool_cli", "--help"], capture_output=True, text=True)
    assert all(name in listed.stdout for name in ("check", "plan", "probe", "schema", "simulate", "trace", "validate"))
    typo = subprocess.run([sys.executable, "-m", "mmpool_cli", "simulat"], capture_output=True, text=True)
    assert typo.returncode == 2
    assert "No such command 'simulat'" in typo.stderr


def test_python_dash_m() -> None:
    result = subprocess.run([sys.executable, "-m", "mmpool_cli", "--help"], capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr
    assert "plan" in result.stdout


def test_installed_console_script(tmp_path) -> None:
    exe = shutil.which("mmpool") or os.path.join(os.path.dirname(sys.executable), "mmpool")
    if not os.path.exists(exe):
        pytest.fail("the mmpool console script is not installed next to this Python")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SGLANG_", "SGL_"))}
    ok = subprocess.run(
        [exe, "plan", "--size", "1GiB", "--workers", "4", "--format", "json"],
        capture_output=True,
        text=True,
        check=False,
        env=env,
    )
    assert ok.returncode == 0, ok.stderr
    assert json.loads(ok.stdout)["per_worker_bytes"] == 268_435_456
    # from another folder, so that only the installed package can answer (a file left out of the
    # wheel would fail here, not in the checkout)
    for argv in (["plan"], ["validate", "--help"], ["check", "--help"], ["probe", "--help"]):
        shown = subprocess.run([exe, *argv], capture_output=True, text=True, check=False, env=env, cwd=tmp_path)
        assert shown.returncode == 0, (argv, shown.stderr)
    probe = subprocess.run(
        [exe, "probe", "--no-ipc", "--timeout", "60"],
        capture_output=True,
        text=True,
        check=False,
        env=env,
        cwd=tmp_path,
    )
    assert probe.returncode in (0, 1, 3), probe.stderr  # 3 where there is no GPU, as in CI
    assert "internal error" not in probe.stderr
    assert "Traceback" not in probe.stderr
    bad = subprocess.run([exe, "plan", "--size", "1 gorilla"], capture_output=True, text=True, check=False, env=env)
    assert bad.returncode == 2
    assert "Traceback" not in bad.stderr
    assert bad.stderr.startswith("mmpool: error: --size: invalid size '1 gorilla'")


@pytest.mark.parametrize(
    "argv",
    [
        "['validate', 'examples/mmpool.yaml', 'examples/sglang-config.yaml', '--format', 'json']",
        "['check', '--format', 'json', '--', 'sglang', 'serve', 'm', '--mm-feature-transport', 'cuda_ipc']",
    ],
)
def test_validate_and_check_never_import_torch_or_nvml(argv: str) -> None:
    code = (
        "import sys\n"
        "from mmpool_cli.cli import main\n"
        f"rc = main({argv})\n"
        "heavy = sorted(m for m in ('torch', 'pynvml', 'matplotlib', 'msgspec') if m in sys.modules)\n"
        "assert not heavy, heavy\n"
        "sys.exit(rc)\n"
    )
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False, cwd=root)
    assert result.returncode == 0, result.stderr


def test_check_does_not_load_pydantic_models() -> None:
    code = (
        "import sys\n"
        "from mmpool_cli.cli import main\n"
        "rc = main(['check', '--format', 'json', '--', 'sglang', 'serve', 'm'])\n"
        "assert 'pydantic.main' not in sys.modules\n"
        "sys.exit(rc)\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr
