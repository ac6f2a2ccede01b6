"""The budget search on a real Ray cluster started here: two nodes of one CPU each, on 127.0.0.1.

Every run is a fresh ``mmpool simulate`` process (as a user runs it), compared byte for byte with
the local executor's answer. The cluster's workers replay with the pure-Python simulator
(``MMPOOL_PURE_PYTHON``), the reference the compiled one is kept equal to, so a task runs long
enough to be killed while it runs. Bounded: each run has a timeout, the cluster ends with the module.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import random
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("ray", reason="Ray is not installed (pip install '.[ray]' or '.[test]')")

from . import ray_cluster  # noqa: E402

pytestmark = pytest.mark.ray

RUN_S = 240  # one search, at most
TICK = 50_000_000
PATCHES = [324, 576, 1296, 2304, 3600, 5184, 8280]  # Qwen2.5-VL-like images, as benchmarks/simulate.py's


def images_trace(path: Path, n_events: int, workers: int = 4, seed: int = 1) -> Path:
    """The ``images`` trace of benchmarks/simulate.py, smaller: Poisson arrivals, exponential holds."""
    rng = random.Random(seed)
    timed = []
    t = 0
    for i in range(n_events // 2):
        t += round(rng.expovariate(2000.0) * 1e9)
        nbytes = rng.choice(PATCHES) * 1176 * 4 + rng.randrange(0, 4) * 4704
        ack = t + round(rng.expovariate(1 / 0.25) * 1e9)
        timed.append((t, 2 * i, f'"op": "alloc", "id": "{i}", "bytes": {nbytes}, "worker": {(i // 3) % workers}'))
        timed.append((ack, 2 * i + 1, f'"op": "free", "id": "{i}"'))
    timed.sort()
    path.write_text("".join(f'{{"t": {t // 10**9}.{t % 10**9:09d}, {rest}}}\n' for t, _, rest in timed))
    return path


@pytest.fixture(scope="module")
def trace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return images_trace(tmp_path_factory.mktemp("trace") / "images.jsonl", 2000)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ray_cluster.Cluster]:
    with ray_cluster.cluster(tmp_path_factory.mktemp("ray"), nodes=2, MMPOOL_PURE_PYTHON="1") as made:
        yield made


def mmpool(*args: str, executor: list[str] | None = None) -> subprocess.Popen[bytes]:
    command = [sys.executable, "-m", "mmpool_cli", "simulate", *args, *(executor or [])]
    return subprocess.Popen(
        command,
        cwd=ray_cluster.ROOT,
        env=ray_cluster.env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )


def finished(process: subprocess.Popen[bytes]) -> tuple[int, bytes, bytes]:
    out, err = process.communicate(timeout=RUN_S)
    return process.returncode, out, err


def on(cluster: ray_cluster.Cluster) -> list[str]:
    return ["--executor", "ray", "--ray-address", cluster.address]


def running_tasks(cluster: ray_cluster.Cluster) -> list[int]:
    """The pids of the cluster's workers running a piece of a search (their title names the task)."""
    sessions = {node.pid for node in cluster.nodes}
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                title = Path(f"/proc/{entry}/cmdline").read_bytes()
                if title.startswith(b"ray::_ray_walk") and os.getsid(int(entry)) in sessions:
                    found.append(int(entry))
            except OSError:
                continue
    return found


def search(trace: Path, *more: str) -> list[str]:
    flags = ["--trace", str(trace), "--workers", "4", "--tp", "2", "--smallest-budget", "--target-fallback", "0.01"]
    return [*flags, "--format", "json", *more]


@pytest.mark.parametrize(
    "how",
    [
        ["--search", "safe"],
        ["--search", "scan"],
        ["--search", "bisect"],
        ["--search-limit", "50x"],  # stopped by the limit: the same unproven answer, the same trials
    ],
    ids=["safe", "scan", "bisect", "limited"],
)
def test_a_search_on_the_cluster_gives_the_local_answer_byte_for_byte(cluster, trace, how) -> None:
    local = finished(mmpool(*search(trace, *how)))
    remote = finished(mmpool(*search(trace, *how), executor=on(cluster)))
    assert local[0] == remote[0] == 1, remote[2]  # the default 1 GiB misses the target: exit 1, answer given
    assert remote[1] == local[1]
    assert b'"exact": true' in local[1] if how[0] == "--search" and how[1] != "bisect" else True
    if how[0] == "--search-limit":
        assert b'"exact": false' in local[1]


def test_a_synthetic_search_on_the_cluster_gives_the_local_answer(cluster) -> None:
    flags = ["--feature-size", "48MiB", "--rate", "20", "--requests", "300", "--seed", "7", "--smallest-budget"]
    local = finished(mmpool(*flags, "--format", "json"))
    remote = finished(mmpool(*flags, "--format", "json", executor=on(cluster)))
    assert (remote[0], remote[1]) == (local[0], local[1]), remote[2]


def test_a_curve_on_the_cluster_gives_the_local_curve_byte_for_byte(cluster, trace) -> None:
    # the search of the mark, then each point the search did not replay whole a Ray task, on a second start
    # of the executor
    flags = ["--trace", str(trace), "--workers", "4", "--tp", "2", "--curve", "--curve-points", "12"]
    flags += ["--target-fallback", "0.01", "--format", "json"]
    local = finished(mmpool(*flags))
    remote = finished(mmpool(*flags, executor=on(cluster)))
    assert (remote[0], remote[1]) == (local[0], local[1]), remote[2]
    assert len(json.loads(local[1])["curve"]) == 12


def test_a_task_that_dies_is_run_again_and_the_answer_is_unchanged(cluster, trace) -> None:
    local = finished(mmpool(*search(trace)))
    process = mmpool(*search(trace), executor=on(cluster))
    deadline = time.monotonic() + 60
    while not (tasks := running_tasks(cluster)) and time.monotonic() < deadline and process.poll() is None:
        time.sleep(0.05)
    assert tasks, "no task of the search was seen running"
    for pid in tasks:  # each still running a piece the moment it is killed (a worker between tasks is IDLE)
        with contextlib.suppress(OSError):
            if Path(f"/proc/{pid}/cmdline").read_bytes().startswith(b"ray::_ray_walk"):
                os.kill(pid, signal.SIGKILL)
    code, out, err = finished(process)
    assert (code, out) == (local[0], local[1]), err
    assert b"retried" in err  # Ray's note that it ran the task again, on stderr, never in the report


def test_a_cluster_that_goes_away_mid_search_is_an_error_not_an_answer(tmp_path, trace) -> None:
    with ray_cluster.cluster(tmp_path / "ray", nodes=2, MMPOOL_PURE_PYTHON="1") as doomed:
        process = mmpool(*search(trace), executor=on(doomed))
        deadline = time.monotonic() + 60
        while not running_tasks(doomed) and time.monotonic() < deadline and process.poll() is None:
            time.sleep(0.05)
        doomed.kill(1)
        doomed.kill(0)
        code, out, err = finished(process)
    assert code == 3, err  # EXIT_UNAVAILABLE
    assert out == b""  # no answer, proven or not
    lines = err.decode().strip().splitlines()
    assert lines[-1].startswith(f"mmpool: error: --executor ray: the cluster at {doomed.address} failed the search")
    assert "no answer was reached" in lines[-1]


LOGS = ray_cluster.ROOT / "tests" / "engines" / "sglang" / "traffic" / "data" / "sglang-0.5.23"


def fleet(folder: Path) -> list[str]:
    """Three servers' logs (JSON and text request logs, OpenAI bodies) sharing request ids, by relative name."""
    folder.mkdir()
    for name in ("server-json-level2.log", "server-text-level2.log", "server-json-level3.log"):
        (folder / name).write_bytes((LOGS / name).read_bytes())
    image = (LOGS / "images" / "png_rgb.png").read_bytes()
    url = "data:image/png;base64," + base64.b64encode(image).decode()
    content = [{"type": "image_url", "image_url": {"url": url}}]
    bodies = [json.dumps({"id": f"body{i % 3}", "timestamp": 1796000000 + i / 4, "messages": [{"role": "user", "content": content}]})
              for i in range(9)]  # fmt: skip
    (folder / "gateway.jsonl").write_text("\n".join(bodies) + "\n")
    return [f"logs/{name}" for name in sorted(os.listdir(folder))]


def mmpool_trace(cwd: Path, *args: str) -> tuple[int, bytes, bytes]:
    command = [sys.executable, "-m", "mmpool_cli", "trace", "--model", "qwen2.5-vl", *args]
    done = subprocess.run(command, cwd=cwd, env=ray_cluster.env(), capture_output=True, timeout=RUN_S)
    return done.returncode, done.stdout, done.stderr


@pytest.mark.parametrize("fmt", ["human", "json"])
def test_a_fleets_logs_read_on_the_cluster_give_the_local_trace_byte_for_byte(cluster, tmp_path, fmt) -> None:
    files = fleet(tmp_path / "logs")  # relative names: each task reads them in the caller's directory
    flags = [*files, "--workers", "3", "--format", fmt]
    local = mmpool_trace(tmp_path, *flags)
    remote = mmpool_trace(tmp_path, *flags, *on(cluster))
    assert local[0] == 0, local[2]
    assert remote == local  # the trace, and the summary on stderr
    assert b'"id": "chat-png#2/0"' in local[1]  # one id in two servers' logs: told apart, in time order
    allocs = [event for event in map(json.loads, local[1].splitlines()) if event["op"] == "alloc"]
    assert {a["worker"] for a in allocs} == {0, 1, 2}  # round-robin over the merged, time-ordered requests
    assert {"body0/0", "body0#2/0", "body0#3/0"} <= {a["id"] for a in allocs}


def test_a_trace_written_to_a_file_on_the_cluster_is_the_local_file(cluster, tmp_path) -> None:
    files = fleet(tmp_path / "logs")
    assert mmpool_trace(tmp_path, *files, "-o", "local.jsonl")[0] == 0
    code, out, err = mmpool_trace(tmp_path, *files, "-o", "remote.jsonl", *on(cluster))
    assert (code, out) == (0, b""), err
    assert (tmp_path / "remote.jsonl").read_bytes() == (tmp_path / "local.jsonl").read_bytes()


def test_a_file_that_cannot_be_read_on_the_cluster_is_the_local_error(cluster, tmp_path) -> None:
    files = fleet(tmp_path / "logs")
    (tmp_path / "logs" / "empty.log").write_text("")
    flags = [files[0], "logs/empty.log", "logs/missing.log", *files[1:], "--format", "json"]
    local = mmpool_trace(tmp_path, *flags)
    remote = mmpool_trace(tmp_path, *flags, *on(cluster))
    assert local[0] == 2 and local[1] == b""
    assert remote == local
    assert "the file is empty" in json.loads(local[2])["error"]


def where_am_i(tag: str) -> tuple[str, int, str]:
    return tag, os.getpid(), os.getcwd()


def fails(tag: str) -> str:
    raise ValueError(f"a fault in {tag}")


def test_the_executors_map_runs_each_item_as_a_task_in_the_callers_directory(cluster, tmp_path, monkeypatch) -> None:
    import ray.cloudpickle

    from mmpool_cli.pools.executors import RayExecutor

    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])  # the test module is no package of the nodes
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("RAY_AUTH_MODE", "disabled")
    run_on = RayExecutor(cluster.address, job="the trace")
    try:
        got = list(run_on.map(where_am_i, ["a", "b", "c", "d"]))
        with pytest.raises(ValueError, match="a fault in b"):  # the task's own error, not a lost cluster
            list(run_on.map(fails, ["b", "c"]))
    finally:
        run_on.close()
    assert [tag for tag, _, _ in got] == ["a", "b", "c", "d"]  # in the items' order
    assert os.getpid() not in {pid for _, pid, _ in got}  # on the cluster's workers, not here
    assert {cwd for _, _, cwd in got} == {str(tmp_path)}


def test_simulate_reads_its_from_files_on_the_cluster_as_here(cluster, tmp_path) -> None:
    files = fleet(tmp_path / "logs")
    flags = ["--model", "qwen2.5-vl", "--workers", "3", "--size", "64MiB", "--format", "json"]
    command = [sys.executable, "-m", "mmpool_cli", "simulate", *flags, *(f for name in files for f in ("--from", name))]

    def run(*extra: str) -> tuple[int, bytes, bytes]:
        done = subprocess.run(
            [*command, *extra], cwd=tmp_path, env=ray_cluster.env(), capture_output=True, timeout=RUN_S
        )
        return done.returncode, done.stdout, done.stderr

    local, remote = run(), run(*on(cluster))
    assert local[0] in (0, 1), local[2]
    assert remote == local
    assert json.loads(local[1])["source"]["traffic"]["files"] == files
