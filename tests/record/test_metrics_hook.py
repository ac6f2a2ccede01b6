"""The metrics of SGLang 0.5.23's own cuda_ipc pool code, kept by the process beside the command, against what the pool did."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from prometheus_client.multiprocess import MultiProcessCollector

sys.path.insert(0, str(Path(__file__).resolve().parent))
import metrics_pool as mp  # noqa: E402
from said import own_stderr  # noqa: E402

pytestmark = mp.NEEDED


@pytest.mark.parametrize("where", ["sglang", "port"])
def test_the_recordings_metrics_are_the_pools_own(tmp_path: Path, where: str) -> None:
    out, joined = tmp_path / "rec", tmp_path / "multiproc"
    joined.mkdir()
    env = {k: v for k, v in os.environ.items() if k.lower() != "prometheus_multiproc_dir"}
    record = [sys.executable, "-m", "mmpool_cli", "record", "--out", str(out)]
    if where == "sglang":  # --enable-metrics: SGLang's multiprocess directory
        env["PROMETHEUS_MULTIPROC_DIR"] = str(joined)
    else:  # --metrics-port: the files the port serves (the port itself closes with the command)
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            record += ["--metrics-port", str(sock.getsockname()[1]), "--metrics-addr", "127.0.0.1"]
    size, truth = 16 << 20, tmp_path / "truth.json"
    command = [*record, "--", sys.executable, *mp.driver_args(tmp_path, truth, size)]
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300, check=False, cwd=mp.ROOT)
    assert (done.returncode, own_stderr(done.stderr)) == (0, "")
    deadline = time.monotonic() + 30  # the process beside the command reads the last records, then goes
    while (out / "follow.pid").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not (out / "follow.pid").exists()
    files = joined if where == "sglang" else out / "metrics.d"
    got = {
        s.name + s.labels.get("le", ""): s.value
        for f in MultiProcessCollector(None, path=str(files)).collect()
        for s in f.samples
        if s.name.startswith("mmpool_") and s.labels.get("le") in (None, "+Inf")
    }
    mp.assert_the_pools(got, out, truth, size)
