"""`mmpool simulate --executor` and `--search-limit`: the flags' errors, and Ray imported only when asked for."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from mmpool_cli.cli.simulate_options import search_limit_arg
from mmpool_cli.errors import MmpoolError

ROOT = Path(__file__).resolve().parents[2]
SEARCH = ["simulate", "--trace", "examples/trace.jsonl", "--workers", "2", "--smallest-budget", "--format", "json"]


def run(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("500M", (500_000_000, "events")),
        ("2G", (2_000_000_000, "events")),
        ("3k", (3000, "events")),
        ("1000001", (1_000_001, "events")),
        ("200x", (200, "replays")),
        (" 7X ", (7, "replays")),
    ],
)
def test_the_search_limit_reads_events_or_whole_replays(text: str, expected: tuple[int, str]) -> None:
    assert search_limit_arg(text) == expected


def test_a_plain_number_the_old_limit_allowed_is_ambiguous_and_refused() -> None:
    with pytest.raises(MmpoolError) as e:
        search_limit_arg("200")
    assert str(e.value) == (
        "--search-limit 200: the limit counts replayed events now, not budgets; write 200x for 200 whole "
        "replays of the trace (what 200 budgets cost at most), or events with a unit, e.g. 200M"
    )


@pytest.mark.parametrize("text", ["", "x", "0x", "-5M", "1.5G", "2P", "lots", "0"])
def test_a_search_limit_that_is_no_count_is_refused(text: str) -> None:
    with pytest.raises(MmpoolError, match="--search-limit: expected replayed events"):
        search_limit_arg(text)


def test_a_plain_search_never_imports_ray() -> None:
    done = run(
        "import sys\nfrom mmpool_cli.cli import main\n"
        f"rc = main({SEARCH!r})\n"
        "assert 'ray' not in sys.modules and 'pyarrow' not in sys.modules, 'imported'\n"
        "sys.exit(rc)\n"
    )
    assert done.returncode == 0, done.stderr


def test_the_ray_executor_without_ray_is_one_line_naming_the_extra() -> None:
    done = run(
        f"import sys\nsys.modules['ray'] = None\nfrom mmpool_cli.cli import main\nsys.exit(main({[*SEARCH, '--executor', 'ray']!r}))\n"
    )
    assert done.returncode == 2
    assert done.stdout == ""
    assert done.stderr == (
        "mmpool: error: --executor ray needs Ray: pip install 'mmpool[ray]' "
        "(or, from an mmpool checkout, pip install '.[ray]')\n"
    )


def test_a_ray_address_without_the_ray_executor_is_refused(run_line) -> None:
    result = run_line(["mmpool", *SEARCH, "--ray-address", "127.0.0.1:6379"])
    assert result.exit_code == 2
    assert "--ray-address names the cluster of --executor ray" in result.stderr
