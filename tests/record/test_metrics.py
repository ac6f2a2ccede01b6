"""mmpool_record.metrics: its series, exactly, in a registry, in multiprocess files and on its port."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import prometheus_client  # before mmpool_record's first import of it: this process keeps its own choice
import pytest
from prometheus_client.multiprocess import MultiProcessCollector
from prometheus_client.parser import text_string_to_metric_families

sys.path.insert(0, str(Path(__file__).resolve().parent))
import metrics_driver as md  # noqa: E402

sys.path.insert(0, str(md.RECORD_DIR))
from mmpool_record import metrics  # noqa: E402

LABELS = {"pool": "0", "transport": "cuda_ipc", "gpu": "0"}


def read(families: Any, pid: int) -> dict[str, float]:
    """One process's mmpool_ samples, keyed as ``md.expected`` keys them."""
    out: dict[str, float] = {}
    for family in families:
        for sample in family.samples:
            labels = dict(sample.labels)
            le = labels.pop("le", None)
            if sample.name.startswith("mmpool_") and labels.get("pid") == str(pid):
                out[sample.name + ("" if le is None else f"{{le={le}}}")] = sample.value
    return out


def assert_expected(got: dict[str, float], scale: int) -> None:
    want = md.expected(scale)
    assert {key: got.get(key) for key in want} == pytest.approx(want)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class Local:
    """The driver's commands run in this process."""

    def __init__(self, metrics_object: metrics.Metrics) -> None:
        self.state: dict[str, Any] = {"metrics": metrics_object}

    def run(self, commands: list[dict[str, Any]]) -> None:
        for command in commands:
            args = dict(command)
            assert md.run(metrics, self.state, args.pop("op"), args) == "ok"


def test_a_pools_series_in_a_registry() -> None:
    registry = prometheus_client.CollectorRegistry()
    Local(metrics.Metrics(registry=registry)).run(md.script(1))
    assert_expected(read(registry.collect(), os.getpid()), 1)
    labels = {**LABELS, "pid": str(os.getpid())}
    assert registry.get_sample_value("mmpool_pool_capacity_bytes", labels) == md.MIB
    assert registry.get_sample_value("mmpool_record_hook_errors_total", {"pid": str(os.getpid())}) == 1


def test_the_files_read_as_prometheus_client_reads_its_own(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PROMETHEUS_MULTIPROC_DIR", raising=False)
    published = metrics.Metrics(private_dir=str(tmp_path))
    Local(published).run(md.script(2))
    published.close()
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        f"counter_{os.getpid()}.db",
        f"gauge_liveall_{os.getpid()}.db",
        f"histogram_{os.getpid()}.db",
    ]
    assert_expected(read(MultiProcessCollector(None, path=str(tmp_path)).collect(), os.getpid()), 2)


@pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool is not installed (Debian: prometheus)")
def test_the_names_follow_prometheus_conventions() -> None:
    registry = prometheus_client.CollectorRegistry()
    Local(metrics.Metrics(registry=registry)).run(md.script(1))
    text = prometheus_client.generate_latest(registry)
    done = subprocess.run(["promtool", "check", "metrics"], input=text, capture_output=True, timeout=60, check=False)
    assert (done.returncode, done.stdout + done.stderr) == (0, b"")


def test_unknown_pool_labels_are_refused() -> None:
    with pytest.raises(ValueError, match="unknown pool labels"):
        metrics.Metrics(registry=prometheus_client.CollectorRegistry()).pool({"worker": "0"}, 1)


def test_without_a_port_or_a_multiprocess_directory_nothing_is_published(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PROMETHEUS_MULTIPROC_DIR", raising=False)
    Local(metrics.Metrics()).run(md.script(1))  # every call a no-op, none an error


def test_without_prometheus_client_metrics_are_off_said_once(tmp_path: Path) -> None:
    code = (
        f"import sys; sys.modules['prometheus_client'] = None; sys.path.insert(0, {str(md.RECORD_DIR)!r})\n"
        "from types import SimpleNamespace as C\nfrom mmpool_record import metrics\n"
        f"for _ in range(2): assert metrics.start(C(out_dir={str(tmp_path)!r}, metrics_port=9)) is None\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False)
    assert (done.returncode, done.stdout) == (0, "")
    assert done.stderr == "mmpool record: prometheus_client is not installed in this Python: the metrics are off\n"


def test_processes_join_a_multiprocess_directory(tmp_path: Path) -> None:
    """SGLang's --enable-metrics: three processes, however prometheus_client came to be imported."""
    env = {k: v for k, v in os.environ.items() if k.lower() != "prometheus_multiproc_dir"}
    joined = {"name": "PROMETHEUS_MULTIPROC_DIR", "value": str(tmp_path)}
    start = {"op": "start", "out_dir": str(tmp_path / "rec")}
    drivers = [md.Driver({**env, "PROMETHEUS_MULTIPROC_DIR": str(tmp_path)}), md.Driver(env), md.Driver(env)]
    try:
        # 1: the variable set from the start; the program's own counter shares its files with mmpool's
        drivers[0].run([start, *md.script(1), {"op": "own_counter", "name": "program", "inc": 7}])
        # 2: the program imported prometheus_client before the variable existed (its own metrics stay in memory)
        drivers[1].run([{"op": "import_plain"}, {"op": "setenv", **joined}, start, *md.script(2)])
        drivers[1].run([{"op": "own_counter", "name": "program", "inc": 5}])
        # 3: mmpool imported it first; the program's counter still goes where it would have
        drivers[2].run([{"op": "import_client"}, {"op": "setenv", **joined}, start])
        drivers[2].run([{"op": "own_counter", "name": "program", "inc": 11}, *md.script(3)])
        families = list(MultiProcessCollector(None, path=str(tmp_path)).collect())
        for scale, driver in enumerate(drivers, 1):
            assert_expected(read(families, driver.proc.pid), scale)
        program = {f.name: f.samples for f in families}["program"]
        assert [(s.name, s.value) for s in program] == [("program_total", 7 + 11)]
    finally:
        stderr = [driver.close() for driver in drivers]
    assert stderr == ["", "", ""]


def scrape(port: int) -> list[Any]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        assert response.headers["Content-Type"] == "text/plain; version=0.0.4; charset=utf-8"
        return list(text_string_to_metric_families(response.read().decode()))


def test_the_port_shows_every_process(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k.lower() != "prometheus_multiproc_dir"}
    port = free_port()
    start = {"op": "start", "out_dir": str(tmp_path), "port": port}
    joined = {"PROMETHEUS_MULTIPROC_DIR": str(tmp_path / "sglang")}
    (tmp_path / "sglang").mkdir()
    top, worker, sglang = md.Driver(env), md.Driver(env), md.Driver({**env, **joined})
    try:
        top.run([{**start, "serve": True}, *md.script(1)])
        worker.run([start, *md.script(2)])  # the port is the serving process's: the worker only writes its files
        sglang.run([start, *md.script(3)])  # --enable-metrics too: into SGLang's directory, which the port shows
        top.run([{"op": "setenv", "name": "PROMETHEUS_MULTIPROC_DIR", "value": joined["PROMETHEUS_MULTIPROC_DIR"]}])
        families = scrape(port)
        for scale, driver in enumerate((top, worker, sglang), 1):
            assert_expected(read(families, driver.proc.pid), scale)
        assert sorted(p.name for p in (tmp_path / "sglang").iterdir()) == [
            f"{kind}_{sglang.proc.pid}.db" for kind in ("counter", "gauge_liveall", "histogram")
        ]
        with pytest.raises(urllib.error.HTTPError, match="404"):
            urllib.request.urlopen(f"http://127.0.0.1:{port}/other", timeout=10)
        assert worker.close() == ""
        gone = read(scrape(port), worker.proc.pid)  # a dead process's gauges go, its counters stay
        assert "mmpool_pool_leased_bytes" not in gone
        assert gone["mmpool_pool_allocations_total"] == 3
    finally:
        assert (worker.close(), sglang.close(), top.close()) == ("", "", "")


def test_a_port_taken_by_another_program_is_said_once(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("", 0))
        taken.listen()
        port = taken.getsockname()[1]
        driver = md.Driver()
        try:
            driver.run([{"op": "start", "out_dir": str(tmp_path), "port": port, "serve": True}] * 2)
        finally:
            stderr = driver.close()
    assert (
        stderr
        == f"mmpool record: port {port} cannot be served (Address already in use): the metrics are not served on it\n"
    )


def test_a_stalled_client_blocks_neither_the_pools_nor_the_port_for_long(tmp_path: Path) -> None:
    port = free_port()
    driver = md.Driver()
    try:
        driver.run([{"op": "start", "out_dir": str(tmp_path), "port": port, "serve": True}])
        with socket.create_connection(("127.0.0.1", port), timeout=10):  # connects, never asks
            began = time.monotonic()
            driver.run(md.script(1))  # the writer's calls do not wait for the port's thread
            assert time.monotonic() - began < 5
            assert_expected(read(scrape(port), driver.proc.pid), 1)  # served once the stalled client is dropped
            assert time.monotonic() - began < 15
    finally:
        assert driver.close() == ""


def test_the_recorded_server_never_imports_prometheus_client(tmp_path: Path) -> None:
    """The hook only writes: no metrics module, no prometheus_client, no port in the server's processes."""
    env = {**os.environ, "PYTHONPATH": str(md.RECORD_DIR), "MMPOOL_RECORD": str(tmp_path / "rec")}
    env["PROMETHEUS_MULTIPROC_DIR"] = str(tmp_path)
    code = (
        "import sys\nfrom mmpool_record import hook, pools, recorder\n"
        "print(sorted(m for m in sys.modules if m.startswith(('prometheus', 'mmpool_record.metrics'))))"
    )
    done = subprocess.run([md.PYTHON, "-c", code], capture_output=True, text=True, env=env, timeout=60, check=False)
    assert (done.returncode, done.stdout, done.stderr) == (0, "[]\n", "")
