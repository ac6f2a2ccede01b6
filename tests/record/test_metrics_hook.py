"""The metrics the hook feeds from SGLang 0.5.23's own cuda_ipc pool code, against what the pool did."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from prometheus_client.multiprocess import MultiProcessCollector

sys.path.insert(0, str(Path(__file__).resolve().parent))
import metrics_pool as mp  # noqa: E402

pytestmark = mp.NEEDED


@pytest.mark.parametrize("where", ["sglang", "port"])
def test_the_hooks_metrics_are_the_pools_own(tmp_path: Path, where: str) -> None:
    out, joined = tmp_path / "rec", tmp_path / "multiproc"
    joined.mkdir()
    env = {k: v for k, v in os.environ.items() if k.lower() != "prometheus_multiproc_dir"}
    env.update(PYTHONPATH=str(mp.RECORD_DIR), MMPOOL_RECORD=str(out))
    if where == "sglang":  # --enable-metrics: SGLang's multiprocess directory
        env["PROMETHEUS_MULTIPROC_DIR"] = str(joined)
    else:  # --metrics-port: the files the port serves (the port itself closes with the process)
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            env["MMPOOL_RECORD_METRICS_PORT"] = str(sock.getsockname()[1])
    size, truth = 16 << 20, tmp_path / "truth.json"
    command = [sys.executable, *mp.driver_args(tmp_path, truth, size)]
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr
    files = joined if where == "sglang" else out / "metrics.d"
    got = {
        s.name + s.labels.get("le", ""): s.value
        for f in MultiProcessCollector(None, path=str(files)).collect()
        for s in f.samples
        if s.name.startswith("mmpool_") and s.labels.get("le") in (None, "+Inf")
    }
    mp.assert_the_pools(got, out, truth, size)
