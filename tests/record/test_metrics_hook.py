"""The metrics the hook feeds from SGLang 0.5.23's own cuda_ipc pool code, against what the pool did.

``pool_driver.py`` runs the wheel's ``memory_pool.py`` on the CPU under the bootstrap; the pool's real
offsets (``truth``) give the counts, the recording's trace the bytes. Needs the wheel, found as
``test_real_pool`` finds it (``$MMPOOL_SGLANG_WHEEL`` first), and torch.
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
from prometheus_client.multiprocess import MultiProcessCollector

HERE = Path(__file__).resolve().parent
RECORD_DIR = HERE.parents[1] / "mmpool_cli" / "_record"
MEMBER = "sglang/srt/multimodal/transport/memory_pool.py"


def wheel() -> str | None:
    """SGLang 0.5.23's wheel where ``test_real_pool`` finds it."""
    found = [os.environ.get("MMPOOL_SGLANG_WHEEL", "")]
    found += glob.glob("/work/cache/sglang/sglang-0.5.23-*.whl")
    found += glob.glob(str(Path.home() / ".cache" / "mmpool-bench" / "sglang-0.5.23" / "sglang-0.5.23-*.whl"))
    return next((w for w in found if w and os.path.isfile(w)), None)


WHEEL = wheel()
pytestmark = [
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


@pytest.mark.parametrize("where", ["sglang", "port"])
def test_the_hooks_metrics_are_the_pools_own(tmp_path: Path, where: str) -> None:
    out, joined = tmp_path / "rec", tmp_path / "multiproc"
    joined.mkdir()
    env = {k: v for k, v in os.environ.items() if k.lower() != "prometheus_multiproc_dir"}
    env.update(PYTHONPATH=str(RECORD_DIR), MMPOOL_RECORD=str(out))
    if where == "sglang":  # --enable-metrics: SGLang's multiprocess directory
        env["PROMETHEUS_MULTIPROC_DIR"] = str(joined)
    else:  # --metrics-port: the files the port serves (the port itself closes with the process)
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            env["MMPOOL_RECORD_METRICS_PORT"] = str(sock.getsockname()[1])
    size, truth = 16 << 20, tmp_path / "truth.json"
    driver = [sys.executable, str(HERE / "pool_driver.py"), str(tree(tmp_path)), str(truth), "7", "120", str(size)]
    done = subprocess.run([*driver, "2", "0.05"], env=env, capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr
    offsets = json.loads(truth.read_text())
    [trace] = out.glob("pool-*.jsonl")
    allocs = [line for line in map(json.loads, trace.read_text().splitlines()) if line["op"] == "alloc"]
    assert [a["offset"] for a in allocs] == offsets
    missed = [a["bytes"] for a in allocs if a["offset"] is None]
    assert 0 < len(missed) < len(allocs)  # the budget is small enough to miss
    files = joined if where == "sglang" else out / "metrics.d"
    got = {
        s.name + s.labels.get("le", ""): s.value
        for f in MultiProcessCollector(None, path=str(files)).collect()
        for s in f.samples
        if s.name.startswith("mmpool_") and s.labels.get("le") in (None, "+Inf")
    }
    lifetimes = got.pop("mmpool_pool_lease_lifetime_seconds_sum")
    data = size - json.loads(next(out.glob("pool-*.json")).read_text())["layout"]["data_start"]
    # the gauges hold the pool's state at the writer's last look while the pool object lived; the last
    # leases may have gone back after it (the process ends with the driver's pool gone): consistent, then
    leased, in_flight = got.pop("mmpool_pool_leased_bytes"), got.pop("mmpool_pool_leases_in_flight")
    largest = got.pop("mmpool_pool_largest_free_range_bytes")
    assert (leased == 0) == (in_flight == 0) and leased + largest <= data
    assert (leased, largest) == (0, data) or in_flight > 0  # all free again, merged
    assert got == {
        "mmpool_pool_capacity_bytes": size,
        "mmpool_pool_allocations_total": len(offsets),
        "mmpool_pool_allocated_bytes_total": sum(a["bytes"] for a in allocs),
        "mmpool_pool_misses_total": offsets.count(None),
        "mmpool_pool_missed_bytes_total": sum(missed),
        "mmpool_pool_released_bytes_total": sum(a["bytes"] for a in allocs) - sum(missed),
        "mmpool_pool_lease_lifetime_seconds_bucket+Inf": len(offsets) - offsets.count(None),
        "mmpool_pool_lease_lifetime_seconds_count": len(offsets) - offsets.count(None),
        "mmpool_record_dropped_events_total": 0,
        "mmpool_record_hook_errors_total": 0,
    }
    # a lease lives until the recycler's first tick after its consumers' acknowledgement (at most 0.2 s here)
    hits = len(offsets) - offsets.count(None)
    assert 0 < lifetimes < hits * (0.2 + 0.05 + 1.0)
