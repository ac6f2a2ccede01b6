"""`mmpool trace --executor`: Ray imported only when asked for, the missing extra, the flags' errors, the help.

The trace on a real Ray cluster, byte for byte the local one, is in tests/pools/test_ray_cluster.py.
"""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
LOGS = "tests/engines/sglang/traffic/data/sglang-0.5.23"
TRACE = ["trace", "--model", "qwen2.5-vl", f"{LOGS}/server-json-level2.log", f"{LOGS}/server-text-level2.log"]


def run(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)


def test_a_trace_of_many_files_never_imports_ray() -> None:
    done = run(
        "import sys\nfrom mmpool_cli.cli import main\n"
        f"rc = main({[*TRACE, '-o', '/dev/null']!r})\n"
        "assert 'ray' not in sys.modules, 'imported'\n"
        "sys.exit(rc)\n"
    )
    assert done.returncode == 0, done.stderr
    assert "mmpool trace: 14 requests" in done.stderr


def test_the_ray_executor_without_ray_is_one_line_naming_the_extra() -> None:
    done = run(
        "import sys\nsys.modules['ray'] = None\nfrom mmpool_cli.cli import main\n"
        f"sys.exit(main({[*TRACE, '--executor', 'ray']!r}))\n"
    )
    assert done.returncode == 2
    assert done.stdout == ""
    assert done.stderr == (
        "mmpool: error: --executor ray needs Ray: pip install 'mmpool[ray]' "
        "(or, from an mmpool checkout, pip install '.[ray]')\n"
    )


def test_a_ray_address_without_the_ray_executor_is_refused(run_line) -> None:
    result = run_line(["mmpool", *TRACE, "--ray-address", "127.0.0.1:6379"])
    assert result.exit_code == 2
    assert result.stdout == ""
    assert result.stderr == "mmpool: error: --ray-address names the cluster of --executor ray; add --executor ray\n"


def test_an_unknown_executor_is_a_usage_error(run_line) -> None:
    result = run_line(["mmpool", *TRACE, "--executor", "dask"])
    assert result.exit_code == 2
    assert "'dask' is not one of 'local', 'ray'" in result.stderr


def test_the_help_names_the_executors_and_exit_3(run_line) -> None:
    result = run_line(["mmpool", "trace", "--help"])
    assert result.exit_code == 0
    text = " ".join(result.stdout.split())
    assert "--executor" in text and "<local|ray>" in text and "--ray-address" in text
    assert "in parallel on Ray (mmpool[ray])" in text
    assert "fleet/*.log --executor ray -o fleet.jsonl" in text
    assert "3 --executor ray: the cluster cannot be reached or went away (nothing written)" in text


@pytest.mark.ray
@pytest.mark.parametrize(
    "command",
    [TRACE, ["simulate", "--trace", "examples/trace.jsonl", "--workers", "2", "--smallest-budget"]],
    ids=["trace", "simulate"],
)
def test_an_address_where_nothing_answers_is_one_line_and_exit_3_at_once(command: list[str]) -> None:
    pytest.importorskip("ray", reason="Ray is not installed (pip install '.[ray]' or '.[test]')")
    with socket.socket() as s:  # a port of this machine that nobody listens on
        s.bind(("127.0.0.1", 0))
        address = f"127.0.0.1:{s.getsockname()[1]}"
    done = run(
        f"import sys\nfrom mmpool_cli.cli import main\nsys.exit(main({[*command, '--executor', 'ray', '--ray-address', address]!r}))\n"
    )
    assert (done.returncode, done.stdout) == (3, "")
    assert done.stderr == (
        f"mmpool: error: --executor ray: cannot connect to {address} "
        f"(nothing answers at {address}: Connection refused)\n"
    )
