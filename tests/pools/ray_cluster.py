"""A small real Ray cluster on this machine for the tests and benchmarks: a head and more nodes, each
``ray start --block`` in a session of its own, ended through the process ids started here (never
``ray stop``, which ends every Ray process of the machine by name)."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
RAY = str(Path(sys.executable).with_name("ray"))
OBJECT_STORE_BYTES = 200_000_000  # the smallest Ray takes is about 75 MB; this machine is shared


@dataclass
class Cluster:
    address: str
    nodes: list[subprocess.Popen[bytes]] = field(default_factory=list)
    address_file: Path | None = None  # where `ray start --head` names it the machine's latest cluster

    def kill(self, node: int, sig: int = signal.SIGKILL) -> None:
        """End one node (0 the head) and every process of its session."""
        process = self.nodes[node]
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, sig)
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(30)

    def end(self) -> None:
        """End every node at once: nothing of a test cluster needs saving (a graceful stop drains for 30 s)."""
        for i in reversed(range(len(self.nodes))):
            self.kill(i)
        self.forget()

    def forget(self) -> None:
        """Take back the head's note that it is the machine's latest cluster, which a head ended by
        SIGKILL leaves behind: Ray would send every later `ray.init()` without an address to it."""
        if self.address_file is not None:
            with contextlib.suppress(OSError):
                # Ray names the head by the machine's address, whatever --node-ip-address says: its port is ours
                if self.address_file.read_text().strip().rpartition(":")[2] == self.address.rpartition(":")[2]:
                    self.address_file.unlink()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def env(**extra: str) -> dict[str, str]:
    """This process's environment, with the checkout first on the nodes' workers' path."""
    out = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    out["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    out["RAY_USAGE_STATS_ENABLED"] = "0"
    out["RAY_AUTH_MODE"] = "disabled"  # a cluster of this machine only, on 127.0.0.1
    return out | extra


def _node(args: list[str], environ: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    with log.open("ab") as out:
        return subprocess.Popen(
            [RAY, "start", *args, "--block", "--disable-usage-stats"],
            env=environ,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


def alive_nodes(address: str, environ: dict[str, str]) -> int:
    code = (
        f"import ray; ray.init(address={address!r}, logging_level='ERROR'); print(sum(n['Alive'] for n in ray.nodes()))"
    )
    done = subprocess.run([sys.executable, "-c", code], env=environ, capture_output=True, text=True, timeout=60)
    return int(done.stdout.split()[-1]) if done.returncode == 0 and done.stdout.split() else 0


@contextlib.contextmanager
def cluster(logs: Path, nodes: int = 2, cpus: int = 1, timeout: float = 120.0, **extra: str) -> Iterator[Cluster]:
    """A head and ``nodes - 1`` more, ``cpus`` each, ready when every node is alive; ended on exit."""
    environ = env(**extra)
    port = free_port()
    address = f"127.0.0.1:{port}"
    logs.mkdir(parents=True, exist_ok=True)
    common = ["--num-cpus", str(cpus), "--object-store-memory", str(OBJECT_STORE_BYTES)]
    head = [
        "--head", "--port", str(port), "--node-ip-address", "127.0.0.1", "--include-dashboard", "false",
        *common,
    ]  # fmt: skip
    temp = environ.get("RAY_TMPDIR") or (sys.platform.startswith("linux") and environ.get("TMPDIR")) or "/tmp"
    made = Cluster(address, address_file=Path(temp) / "ray" / "ray_current_cluster")  # Ray's own rule
    try:
        made.nodes.append(_node(head, environ, logs / "head.log"))
        deadline = time.monotonic() + timeout
        while True:  # the head's GCS takes its port when it is up
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", port)) == 0:
                    break
            if made.nodes[0].poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the Ray head did not start: see {logs / 'head.log'}")
            time.sleep(0.2)
        for i in range(1, nodes):
            node = ["--address", address, "--node-ip-address", "127.0.0.1", *common]
            made.nodes.append(_node(node, environ, logs / f"node{i}.log"))
        while alive_nodes(address, environ) < nodes:
            if time.monotonic() > deadline:
                raise RuntimeError(f"the Ray cluster did not come up with {nodes} nodes: see {logs}")
            time.sleep(0.5)
        yield made
    finally:
        made.end()
