"""The recorder across fork, spawn and os._exit, in real processes: a child never touches its parent's recording."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
import fake_sglang  # noqa: E402

from mmpool_cli.traces.events import ALLOC  # noqa: E402
from mmpool_cli.traces.recording import read_pools  # noqa: E402

# argv: how the child ends (exit, os_exit, mp_fork, mp_spawn), whether the writer is busy at the fork,
# whether the parent then kills itself
PROGRAM = """
import multiprocessing
import os
import signal
import sys
import time
from sglang.srt.multimodal.transport.memory_pool import StreamOrderedMmFeaturePool


def drive(items):
    pool = StreamOrderedMmFeaturePool(memory_size=1 << 20)
    for i in range(items):
        lease = pool.copy_tensor(4096)
        pool.cancel_lease(lease)
        with pool._lock:
            pool._recycle_ready_leases_locked()


if __name__ == "__main__":
    how, busy, kill = sys.argv[1], sys.argv[2] == "busy", sys.argv[3] == "kill"
    drive(5)  # the first events: the parent's stream and writer exist
    time.sleep(0.1)  # a drain: the parent's manifest is written
    if busy:
        from mmpool_record.recorder import RECORDER

        RECORDER.lock.acquire()  # the writer holds its lock (a drain in progress) when the fork comes
    t = time.monotonic()
    if how in ("exit", "os_exit"):
        pid = os.fork()
        if pid == 0:
            drive(3)
            if how == "os_exit":
                os._exit(0)
            sys.exit(0)  # the normal way out: atexit handlers, the parent's among them
        os.waitpid(pid, 0)
    else:
        child = multiprocessing.get_context(how[3:]).Process(target=drive, args=(3,))
        child.start()
        child.join()
    print(f"{time.monotonic() - t:.3f}", flush=True)
    if busy:
        RECORDER.lock.release()
    if kill:
        os.kill(os.getpid(), signal.SIGKILL)
"""


def run(tmp: Path, *args: str) -> tuple[subprocess.CompletedProcess[str], Path]:
    tree = fake_sglang.tree(tmp / "tree")
    (tree / "program.py").write_text(PROGRAM)
    out = tmp / "rec"
    env = {k: v for k, v in os.environ.items() if not k.startswith("MMPOOL_RECORD")}
    env["PYTHONPATH"] = os.pathsep.join([str(fake_sglang.RECORD_DIR), str(tree)])
    env.update({"MMPOOL_RECORD": str(out), "MMPOOL_RECORD_DIGESTS": str(fake_sglang.digests(tmp))})
    got = subprocess.run(
        [sys.executable, str(tree / "program.py"), *args], capture_output=True, text=True, env=env, timeout=120
    )
    return got, out


def by_pid(out: Path) -> dict[int, dict[str, object]]:
    return {int(p["pid"]): p for p in (json.loads(f.read_text()) for f in out.glob("pool-*.json"))}


def test_child_exits_normally_then_parent_killed_manifest_says_incomplete(tmp_path: Path) -> None:
    got, out = run(tmp_path, "exit", "idle", "kill")
    assert got.returncode == -signal.SIGKILL, got.stderr
    assert got.stderr == ""
    manifests = by_pid(out)
    assert len(manifests) == 2  # the parent's pool and the child's own
    [parent] = [p for p in manifests.values() if p.get("complete") is not True]
    [child] = [p for p in manifests.values() if p.get("complete") is True]
    assert parent["complete"] is False and child["pid"] != parent["pid"]
    traces = {int(t.info["pid"]): t for t in read_pools(str(out))}
    assert not traces[int(str(parent["pid"]))].complete  # no END in the parent's stream
    assert sum(e[1] == ALLOC for e in traces[int(str(child["pid"]))].events) == 3  # the child's own events only
    assert sum(e[1] == ALLOC for e in traces[int(str(parent["pid"]))].events) == 5


@pytest.mark.parametrize("how", ["exit", "os_exit"])
def test_fork_while_writer_busy_child_exits_at_once(tmp_path: Path, how: str) -> None:
    got, out = run(tmp_path, how, "busy", "live")
    assert (got.returncode, got.stderr) == (0, "")
    assert float(got.stdout) < 2.0  # the child waited 5 s on its parent's lock before
    manifests = by_pid(out)
    assert len(manifests) == 2 and all(p["complete"] is True for p in manifests.values())
    counts = sorted(sum(e[1] == ALLOC for e in t.events) for t in read_pools(str(out)))
    assert counts == [3, 5]


@pytest.mark.parametrize("how", ["mp_fork", "mp_spawn"])
def test_multiprocessing_children_record_their_own(tmp_path: Path, how: str) -> None:
    got, out = run(tmp_path, how, "idle", "live")
    assert (got.returncode, got.stderr) == (0, "")
    traces = read_pools(str(out))
    assert len({t.info["pid"] for t in traces}) == 2
    assert all(t.complete and t.info["complete"] is True for t in traces)  # mp's os._exit path drains first
    assert sorted(sum(e[1] == ALLOC for e in t.events) for t in traces) == [3, 5]
