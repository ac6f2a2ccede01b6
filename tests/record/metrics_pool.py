"""SGLang 0.5.23's own pool code recorded for the metrics tests: the wheel, its tree, and what the pool did.

``pool_driver.py`` runs the wheel's ``memory_pool.py`` on the CPU; the pool's real offsets (its
``truth``) give the counts, the recording's trace the bytes. The wheel is found as ``test_real_pool``
finds it (``$MMPOOL_SGLANG_WHEEL`` first); without it, or without torch, the tests skip.
"""

from __future__ import annotations

import glob
import importlib.util
import json
import os
import socket
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
RECORD_DIR = ROOT / "mmpool_cli" / "_record"
DRIVER = HERE / "pool_driver.py"
MEMBER = "sglang/srt/multimodal/transport/memory_pool.py"


def wheel() -> str | None:
    """SGLang 0.5.23's wheel where ``test_real_pool`` finds it."""
    found = [os.environ.get("MMPOOL_SGLANG_WHEEL", "")]
    found += glob.glob("/work/cache/sglang/sglang-0.5.23-*.whl")
    found += glob.glob(str(Path.home() / ".cache" / "mmpool-bench" / "sglang-0.5.23" / "sglang-0.5.23-*.whl"))
    return next((w for w in found if w and os.path.isfile(w)), None)


WHEEL = wheel()
NEEDED = [
    pytest.mark.skipif(WHEEL is None, reason="SGLang 0.5.23's wheel is not here (pip download --no-deps)"),
    pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="torch is not installed"),
]


def tree(tmp_path: Path) -> Path:
    """The wheel's memory_pool.py with empty packages around it and a runtime_context stand-in."""
    root = tmp_path / "tree"
    with zipfile.ZipFile(str(WHEEL)) as archive:
        (root / MEMBER).parent.mkdir(parents=True)
        (root / MEMBER).write_bytes(archive.read(MEMBER))
    for package in ("sglang", "sglang/srt", "sglang/srt/multimodal", "sglang/srt/multimodal/transport"):
        (root / package / "__init__.py").touch()
    (root / "sglang/srt/runtime_context.py").write_text("def get_parallel():\n    return None\n")
    return root


def driver_args(tmp_path: Path, truth: Path, size: int, items: int = 120) -> list[str]:
    """pool_driver.py's arguments: seed 7, two consumers, SGLang's 0.05 s recycle interval."""
    return [str(DRIVER), str(tree(tmp_path)), str(truth), "7", str(items), str(size), "2", "0.05"]


def assert_the_pools(got: dict[str, float], out: Path, truth: Path, size: int) -> None:
    """``got`` (a sample's name, ``+Inf`` appended for that bucket) is what the pool did, as it did it."""
    from mmpool_cli.traces.events import ALLOC
    from mmpool_cli.traces.recording import read_pools

    offsets = json.loads(truth.read_text())
    [trace] = read_pools(str(out))
    allocs = [{"bytes": e[3], "offset": e[4]} for e in trace.events if e[1] == ALLOC]
    assert [a["offset"] for a in allocs] == offsets
    missed = [a["bytes"] for a in allocs if a["offset"] is None]
    assert 0 < len(missed) < len(allocs)  # the budget is small enough to miss
    got = dict(got)
    lifetimes = got.pop("mmpool_pool_lease_lifetime_seconds_sum")
    data = size - json.loads(next(out.glob("pool-*.json")).read_text())["layout"]["data_start"]
    # the gauges hold the pool's state at the writer's last look while the pool object lived; the last
    # leases may have gone back after it (the driver's pool is gone before its process ends): consistent, then
    leased, in_flight = got.pop("mmpool_pool_leased_bytes"), got.pop("mmpool_pool_leases_in_flight")
    largest = got.pop("mmpool_pool_largest_free_range_bytes")
    assert (leased == 0) == (in_flight == 0) and leased + largest <= data
    assert (leased, largest) == (0, data) or in_flight > 0  # all free again, merged
    hits = len(offsets) - offsets.count(None)
    assert got == {
        "mmpool_pool_capacity_bytes": size,
        "mmpool_pool_allocations_total": len(offsets),
        "mmpool_pool_allocated_bytes_total": sum(a["bytes"] for a in allocs),
        "mmpool_pool_misses_total": offsets.count(None),
        "mmpool_pool_missed_bytes_total": sum(missed),
        "mmpool_pool_released_bytes_total": sum(a["bytes"] for a in allocs) - sum(missed),
        "mmpool_pool_lease_lifetime_seconds_bucket+Inf": hits,
        "mmpool_pool_lease_lifetime_seconds_count": hits,
        "mmpool_record_dropped_events_total": 0,
        "mmpool_record_hook_errors_total": 0,
    }
    # a lease lives until the recycler's first tick after its consumers' acknowledgement (at most 0.2 s here)
    assert 0 < lifetimes < hits * (0.2 + 0.05 + 1.0)


def free_port() -> int:
    """A TCP port nothing listens on now, for ``--metrics-port``."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def run_program(src: Path, *args: str, record: Path | None = None) -> subprocess.CompletedProcess[str]:
    """Run ``src/program.py`` with ``src`` first on its path, plain or under ``mmpool record --out record``."""
    env = {**os.environ, "PYTHONPATH": str(src), "PYTHONHASHSEED": "0"}
    head = [] if record is None else [sys.executable, "-m", "mmpool_cli", "record", "--out", str(record), "--"]
    done = subprocess.run(
        [*head, sys.executable, str(src / "program.py"), *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        timeout=300,
        check=False,
    )
    if record is not None:  # the program's own stderr (the tests read it), without what mmpool record said last
        from said import own_stderr

        done.stderr = own_stderr(done.stderr)
    return done
