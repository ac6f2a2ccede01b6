"""Which Ray ``--executor ray`` joins: a Ray of its own without an address, never a gone cluster the
machine last named; a head that refuses the client's token named as the cause; the test clusters leave
no note behind. Real Ray processes, each in a Ray directory of its own (``RAY_TMPDIR``), never /tmp/ray."""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("ray", reason="Ray is not installed (pip install '.[ray]' or '.[test]')")

from . import ray_cluster  # noqa: E402
from .test_ray_cluster import RUN_S, images_trace, search  # noqa: E402

pytestmark = pytest.mark.ray


@pytest.fixture
def ray_dir() -> Iterator[Path]:
    """A Ray directory of this test's own, short enough for the sockets Ray makes in it."""
    made = Path(tempfile.mkdtemp(prefix="mmpool-ray-", dir="/tmp"))
    try:
        yield made
    finally:
        shutil.rmtree(made, ignore_errors=True)


def simulate(args: list[str], **environ: str) -> subprocess.CompletedProcess[bytes]:
    command = [sys.executable, "-m", "mmpool_cli", "simulate", *args]
    env = ray_cluster.env(**environ)
    return subprocess.run(command, cwd=ray_cluster.ROOT, env=env, capture_output=True, timeout=RUN_S)


def test_no_address_runs_a_ray_of_its_own_not_the_gone_cluster_the_machine_last_named(tmp_path, ray_dir) -> None:
    # what a head killed with SIGKILL leaves: Ray's note of the latest cluster, naming a port nothing answers
    note = ray_dir / "ray" / "ray_current_cluster"
    note.parent.mkdir()
    note.write_text(f"127.0.0.1:{ray_cluster.free_port()}")
    trace = images_trace(tmp_path / "images.jsonl", 400)
    local = simulate(search(trace))
    on_ray = simulate([*search(trace), "--executor", "ray"], RAY_TMPDIR=str(ray_dir))
    assert (on_ray.returncode, on_ray.stdout) == (local.returncode, local.stdout), on_ray.stderr.decode()[-2000:]


def test_a_head_that_refuses_the_clients_token_is_named_as_the_cause(tmp_path, ray_dir) -> None:
    token = "0123456789abcdef0123456789abcdef"
    with ray_cluster.cluster(
        tmp_path / "logs", nodes=1, RAY_TMPDIR=str(ray_dir), RAY_AUTH_MODE="token", RAY_AUTH_TOKEN=token
    ) as head:
        home = tmp_path / "home"  # no ~/.ray/auth_token: the client has no token, as on another machine
        home.mkdir()
        trace = images_trace(tmp_path / "images.jsonl", 40)
        done = simulate([*search(trace), "--executor", "ray", "--ray-address", head.address], HOME=str(home))
    assert (done.returncode, done.stdout) == (3, b"")
    assert done.stderr.decode().splitlines()[-1] == (
        f"mmpool: error: --executor ray: {head.address} refuses this client: its head uses Ray's token "
        "authentication and this client gave no token or another (InvalidAuthToken); set RAY_AUTH_TOKEN to the "
        "cluster's token ('ray get-auth-token' on the head prints it), or put it in ~/.ray/auth_token"
    )


def test_a_test_cluster_ended_by_sigkill_leaves_no_note_naming_it(tmp_path, ray_dir) -> None:
    with ray_cluster.cluster(tmp_path / "logs", nodes=1, RAY_TMPDIR=str(ray_dir)) as made:
        assert made.address_file == ray_dir / "ray" / "ray_current_cluster"
        port = made.address.rpartition(":")[2]
        assert made.address_file.read_text().strip().endswith(f":{port}")  # the head names itself the latest
    assert not made.address_file.exists()
