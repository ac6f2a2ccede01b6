"""A real Prometheus server scrapes mmpool's metrics port; its HTTP API gives back the exact values.

Needs Debian's ``prometheus`` package (``.ci/run`` installs it); skips with that reason without it.
"""

from __future__ import annotations

import json
import os
import select
import shutil
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
import metrics_driver as md  # noqa: E402
import metrics_pool as mp  # noqa: E402

PROMETHEUS = shutil.which("prometheus")
EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
pytestmark = pytest.mark.skipif(
    PROMETHEUS is None, reason="needs Prometheus' server on PATH (Debian: apt-get install prometheus; .ci/run does)"
)


def free_ports(n: int) -> list[int]:
    """``n`` distinct ports free now (held together while they are chosen)."""
    import socket

    socks = [socket.socket() for _ in range(n)]
    try:
        for sock in socks:
            sock.bind(("127.0.0.1", 0))
        return [int(sock.getsockname()[1]) for sock in socks]
    finally:
        for sock in socks:
            sock.close()


def query(web: int, expr: str) -> list[dict[str, Any]]:
    url = f"http://127.0.0.1:{web}/api/v1/query?" + urllib.parse.urlencode({"query": expr})
    with urllib.request.urlopen(url, timeout=10) as response:
        answer = json.load(response)
    assert answer["status"] == "success", (expr, answer)
    return list(answer["data"]["result"])


def by_pid(result: list[dict[str, Any]]) -> dict[str, float]:
    return {series["metric"]["pid"]: float(series["value"][1]) for series in result}


@pytest.fixture
def prometheus(tmp_path: Path):
    """Start a Prometheus scraping a metrics port every second; yield (its web port, the scraped port)."""
    target, web = free_ports(2)
    config = tmp_path / "prometheus.yml"
    config.write_text(
        "global: {scrape_interval: 1s, scrape_timeout: 1s}\n"
        f"scrape_configs: [{{job_name: mmpool, static_configs: [{{targets: ['127.0.0.1:{target}']}}]}}]\n"
    )
    log = (tmp_path / "prometheus.log").open("w")
    server = subprocess.Popen(
        [
            str(PROMETHEUS),
            f"--config.file={config}",
            f"--storage.tsdb.path={tmp_path / 'data'}",
            f"--web.listen-address=127.0.0.1:{web}",
            "--log.level=warn",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        yield web, target
    finally:
        server.terminate()
        try:
            server.wait(timeout=20)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()
        log.close()


def wait_for(web: int, expr: str, count: int, limit_s: float = 90.0) -> None:
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        try:
            if len(query(web, expr)) == count:
                return
        except OSError:  # not listening yet
            pass
        time.sleep(0.5)
    raise AssertionError(f"Prometheus did not show {count} series of {expr} in {limit_s} s")


def test_a_real_prometheus_scrapes_every_pool(tmp_path: Path, prometheus: tuple[int, int]) -> None:
    web, port = prometheus
    env = {k: v for k, v in os.environ.items() if k.lower() != "prometheus_multiproc_dir"}
    start = {"op": "start", "out_dir": str(tmp_path / "rec"), "port": port}
    top, worker = md.Driver(env), md.Driver(env)
    try:
        top.run([{**start, "serve": True}, *md.script(1)])  # as the process beside the command serves it
        worker.run([start, *md.script(2)])
        wait_for(web, "mmpool_record_hook_errors_total == 1", 2)  # the scripts' last step, scraped
        pids = {str(top.proc.pid): 1, str(worker.proc.pid): 2}
        for key in md.expected(1):
            name, _, le = key.partition("{le=")
            expr = name + (f'{{le="{le[:-1]}"}}' if le else "")
            got = by_pid(query(web, expr))
            assert got == pytest.approx({pid: md.expected(scale)[key] for pid, scale in pids.items()}), key
        labels = query(web, "mmpool_pool_capacity_bytes")[0]["metric"]
        assert {k: labels[k] for k in ("transport", "gpu", "job")} == {
            "transport": "cuda_ipc",
            "gpu": "0",
            "job": "mmpool",
        }
        # the dashboard's arithmetic, worked out by hand from md.script: misses 1 + 1 of 3 + 3 allocations
        [ratio] = query(web, "sum(mmpool_pool_misses_total) / sum(mmpool_pool_allocations_total)")
        assert float(ratio["value"][1]) == pytest.approx(1 / 3)
        allocated = 3 * md.MIB // 4 + 400000 + 3 * 2 * md.MIB // 4 + 800000
        [ratio] = query(web, "sum(mmpool_pool_missed_bytes_total) / sum(mmpool_pool_allocated_bytes_total)")
        assert float(ratio["value"][1]) == pytest.approx(1200000 / allocated)
        # four lifetimes, two of 0.05 s and two of 0.12 s: the median at the 0.05 bucket's top, p90 inside (0.1, 0.15]
        for q, want in ((0.5, 0.05), (0.9, 0.1 + 0.05 * (3.6 - 2) / 2)):
            [got] = query(web, f"histogram_quantile({q}, sum by (le) (mmpool_pool_lease_lifetime_seconds_bucket))")
            assert float(got["value"][1]) == pytest.approx(want)
        # every query of the example dashboard is one Prometheus accepts; those without a rate find their series
        dashboard = json.loads((EXAMPLES / "grafana-dashboard.json").read_text())
        for target in (target for panel in dashboard["panels"] for target in panel["targets"]):
            expr = target["expr"].replace("$__rate_interval", "1m").replace("$pool", ".*")
            result = query(web, expr)
            assert result or "rate(" in expr or "increase(" in expr, expr
    finally:
        stderr = [top.close(), worker.close()]
    assert stderr == ["", ""]


@pytest.mark.parametrize("_", [pytest.param(None, marks=mp.NEEDED, id="sglang-pool")])
def test_a_real_prometheus_scrapes_a_recording_of_sglangs_pool(
    tmp_path: Path, prometheus: tuple[int, int], _: None
) -> None:
    """SGLang's own pool code under ``mmpool record --metrics-port``, scraped while the process still lives."""
    web, port = prometheus
    out, size, truth = tmp_path / "rec", 16 << 20, tmp_path / "truth.json"
    env = {k: v for k, v in os.environ.items() if k.lower() != "prometheus_multiproc_dir"}
    args = mp.driver_args(tmp_path, truth, size)
    code = (
        f"import runpy, sys; sys.argv = {args!r}; runpy.run_path(sys.argv[0], run_name='__main__')\n"
        "print('done', flush=True); sys.stdin.read()\n"  # the pool's process lives on until told
    )
    record = [sys.executable, "-m", "mmpool_cli", "record", "--out", str(out), "--metrics-port", str(port), "--"]
    server = subprocess.Popen(  # mmpool record execs the command: this is the pool's process
        [*record, sys.executable, "-c", code],
        cwd=EXAMPLES.parent,
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        bufsize=0,
    )
    try:
        assert server.stdout is not None
        deadline = time.monotonic() + 120
        said = b""
        while not said.endswith(b"done\n") and time.monotonic() < deadline:
            if select.select([server.stdout], [], [], 1)[0]:
                more = os.read(server.stdout.fileno(), 4096)
                if not more:
                    break  # it ended
                said += more
        assert said.endswith(b"done\n"), f"the recorded pool's process did not finish its run in 120 s: {said!r}"
        total = len(json.loads(truth.read_text()))
        wait_for(web, f"mmpool_pool_allocations_total == {total}", 1)
        got: dict[str, float] = {}
        for name in ("mmpool_pool", "mmpool_record"):
            for series in query(web, f'{{__name__=~"{name}_.*", le=~"|[+]Inf"}}'):
                got[series["metric"]["__name__"] + series["metric"].get("le", "")] = float(series["value"][1])
        mp.assert_the_pools(got, out, truth, size)
    finally:
        _, stderr = server.communicate(timeout=60)
    assert server.returncode == 0, stderr


@pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool is not installed (Debian: prometheus)")
def test_the_example_scrape_config_is_valid() -> None:
    done = subprocess.run(
        ["promtool", "check", "config", str(EXAMPLES / "prometheus.yml")], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stdout + done.stderr
