"""The process beside the command (mmpool_record.follow): it reads the recording as it grows, and ends with the command."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
import fake_sglang  # noqa: E402
from said import own_stderr  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
ITEMS = 40


def record(tmp: Path, *flags: str, env: dict[str, str] | None = None) -> tuple[subprocess.CompletedProcess[str], Path]:
    tree = fake_sglang.tree(tmp / "tree")
    out = tmp / "rec"
    full = {k: v for k, v in os.environ.items() if not k.startswith("MMPOOL_RECORD")}
    full = {k: v for k, v in full.items() if k.lower() != "prometheus_multiproc_dir"}
    full.update({"PYTHONPATH": str(tree), "MMPOOL_RECORD_DIGESTS": str(fake_sglang.digests(tmp)), **(env or {})})
    command = [sys.executable, "-m", "mmpool_cli", "record", "--out", str(out), *flags, "--"]
    command += [sys.executable, str(tree / "program.py"), str(ITEMS)]
    done = subprocess.run(command, capture_output=True, text=True, env=full, cwd=ROOT, timeout=120, check=False)
    deadline = time.monotonic() + 30  # it reads the last records after the command ended, then goes
    while (out / "follow.pid").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    return done, out


def series(directory: Path) -> dict[str, float]:
    from prometheus_client.multiprocess import MultiProcessCollector

    return {
        s.name: s.value
        for f in MultiProcessCollector(None, path=str(directory)).collect()
        for s in f.samples
        if s.name.startswith("mmpool_") and "le" not in s.labels
    }


def test_without_a_destination_it_reads_quietly_and_ends_with_the_command(tmp_path: Path) -> None:
    done, out = record(tmp_path)
    assert (done.returncode, own_stderr(done.stderr)) == (3, "")  # the program's own status, nothing said
    assert not (out / "follow.pid").exists() and not (out / "metrics.d").exists()


def test_the_port_and_its_files_hold_what_the_pool_did(tmp_path: Path) -> None:
    pytest.importorskip("prometheus_client")
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    done, out = record(tmp_path, "--metrics-port", str(port), "--metrics-addr", "127.0.0.1")
    assert (done.returncode, own_stderr(done.stderr)) == (3, "")
    got = series(out / "metrics.d")
    assert got["mmpool_pool_allocations_total"] == ITEMS
    assert got["mmpool_pool_capacity_bytes"] == 1 << 20
    assert got["mmpool_record_dropped_events_total"] == 0
    with socket.socket() as sock:  # the port went with the command
        assert sock.connect_ex(("127.0.0.1", port)) != 0


def test_the_servers_multiprocess_directory_gets_the_series(tmp_path: Path) -> None:
    pytest.importorskip("prometheus_client")
    joined = tmp_path / "sglang-metrics"
    joined.mkdir()
    done, out = record(tmp_path, env={"PROMETHEUS_MULTIPROC_DIR": str(joined)})
    assert (done.returncode, own_stderr(done.stderr)) == (3, "")
    assert series(joined)["mmpool_pool_allocations_total"] == ITEMS
    assert not (out / "metrics.d").exists()
