"""SGLang 0.5.23's own cuda_ipc pool code, recorded under ``mmpool record`` and replayed: the same decisions.

The pool's methods come from the wheel (``/work/cache/sglang``, ``~/.cache/mmpool-bench`` or
``$MMPOOL_SGLANG_WHEEL``; the test skips without one, and without torch): two processes each drive
one pool (``pool_driver.py``: the real allocator and the real recycler thread, on the CPU) under
``mmpool record``; ``mmpool simulate --trace DIR --events`` then makes every decision they made.
"""

from __future__ import annotations

import glob
import importlib.util
import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from said import own_stderr  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
DRIVER = Path(__file__).with_name("pool_driver.py")
MODULE = "sglang/srt/multimodal/transport/memory_pool.py"
VMM = "sglang/srt/utils/cuda_vmm_transport_utils.py"
# stand-ins for what cuda_vmm_transport_utils imports besides memory_pool (none of it runs here)
STANDINS = {
    "sglang/srt/managers/schedule_batch.py": "Modality = MultimodalDataItem = MultimodalProcessorOutput = object\n",
    "sglang/srt/utils/cuda_ipc_transport_utils.py": (
        "DEFER_CUDA_IPC_FEATURE_RECONSTRUCTION_KEY = 'x'\nMM_FEATURE_CACHE_SIZE = 0\n"
        "MM_ITEM_MEMORY_POOL_RECYCLE_INTERVAL = 0.05\nget_mm_feature_pool_size_per_worker = None\n\n\n"
        "class CudaIpcTensorTransportProxy:\n    pass\n"
    ),
    "sglang/srt/utils/cuda_vmm_utils.py": (
        "def align_up(value, alignment):\n    return (value + alignment - 1) // alignment * alignment\n\n\n"
        "_FD_SEND_TIMEOUT_S = VmmReservation = _get_cuda_driver = _recv_fd = _send_fd = None\n"
        "allocation_handle_type_name = check_drv = get_allocation_granularity = None\n"
        "get_device_allocation_handle_type = import_and_map_alloc = make_device_allocation_prop = None\n"
        "release_mappings = tensor_from_pointer = None\n"
    ),
}
MEMORY = 48 << 20  # per pool: small enough that 12 MiB features miss now and then
INTERVAL = "0.01"


def wheel() -> str | None:
    given = os.environ.get("MMPOOL_SGLANG_WHEEL")
    found = [given] if given else []
    found += glob.glob("/work/cache/sglang/sglang-0.5.23-*.whl")
    found += glob.glob(str(Path.home() / ".cache" / "mmpool-bench" / "sglang-0.5.23" / "sglang-0.5.23-*.whl"))
    return next((w for w in found if w and os.path.exists(w)), None)


pytestmark = [
    pytest.mark.skipif(wheel() is None, reason="SGLang 0.5.23's wheel is not here (pip download --no-deps)"),
    pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="torch is not installed"),
]


def tree(root: Path) -> Path:
    """The wheel's memory_pool.py, with empty package files and a runtime_context stand-in."""
    package = root / "sglang" / "srt" / "multimodal" / "transport"
    package.mkdir(parents=True)
    for folder in (package, package.parent, package.parent.parent, root / "sglang"):
        (folder / "__init__.py").write_text("")
    (root / "sglang" / "srt" / "runtime_context.py").write_text(
        "def get_parallel():\n    return None\n\n\nget_mm = get_serving = get_parallel\n"
    )
    for folder in ("managers", "utils"):
        (root / "sglang" / "srt" / folder).mkdir()
        (root / "sglang" / "srt" / folder / "__init__.py").write_text("")
    for name, text in STANDINS.items():
        (root / name).write_text(text)
    with zipfile.ZipFile(str(wheel())) as z:
        (package / "memory_pool.py").write_bytes(z.read(MODULE))
        (root / VMM).write_bytes(z.read(VMM))
    return root


def mmpool(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    full = {**os.environ, **(env or {})}
    return subprocess.run(
        [sys.executable, "-m", "mmpool_cli", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env=full,
        timeout=300,
        check=False,
    )


def test_recorded_real_pools_replay_decision_for_decision(tmp_path: Path) -> None:
    src = tree(tmp_path / "tree")
    out = tmp_path / "rec"
    drive = [sys.executable, str(DRIVER), str(src)]
    a = " ".join([*drive, str(tmp_path / "a.json"), "1", "250", str(MEMORY), "2", INTERVAL])
    b = " ".join([*drive, str(tmp_path / "b.json"), "2", "250", str(MEMORY), "2", INTERVAL])
    got = mmpool("record", "--out", str(out), "--", "sh", "-c", f"{a} & {b}; wait")
    assert got.returncode == 0, got.stderr
    assert own_stderr(got.stderr) == ""
    pools = [json.loads(p.read_text()) for p in sorted(out.glob("pool-*.json"))]
    assert len(pools) == 2
    for info in pools:
        assert info["code_of"] == ["0.5.19", "0.5.20", "0.5.21", "0.5.22", "0.5.23"] and info["complete"] is True
        assert info["layout"] == {"memory_size": MEMORY, "data_start": 4096 * 3 * 4, "slots": 4096, "consumers": 2}
        assert info["recycle_interval_s"] == 0.01

    env = {"SGLANG_MM_ITEM_MEM_POOL_RECYCLE_INTERVAL_SEC": INTERVAL}
    flags = ["--size", f"{2 * MEMORY}B", "--workers", "2", "--tp", "2", "--events", "--format", "json"]
    replay = mmpool("simulate", "--trace", str(out), *flags, env=env)
    report = json.loads(replay.stdout)
    [finding] = [f for f in report["findings"] if f["code"].startswith("record-")]
    assert finding["code"] == "record-replay-matches", finding
    per_worker: dict[int, list[int | None]] = {0: [], 1: []}
    for event in report["events"]:
        per_worker[event["worker"]].append(event["offset"])
    real = sorted(json.loads((tmp_path / f"{n}.json").read_text()) for n in "ab")
    assert sorted(per_worker.values()) == real  # what the pools returned, as the drivers saw it
    assert any(None in offsets for offsets in real)  # the budget is small enough to miss

    larger = mmpool("simulate", "--trace", str(out), *flags[:1], f"{4 * MEMORY}B", *flags[2:], env=env)
    report = json.loads(larger.stdout)
    [finding] = [f for f in report["findings"] if f["code"].startswith("record-")]
    assert finding["code"] == "record-not-compared"
    assert f"--size {2 * MEMORY // 2**20}MiB --workers 2 --tp 2" in finding["message"]
    assert sum(e["offset"] is None for e in report["events"]) < sum(o.count(None) for o in real)


def test_recorded_real_vmm_pool_replays_decision_for_decision(tmp_path: Path) -> None:
    src = tree(tmp_path / "tree")
    out = tmp_path / "rec"
    truth = tmp_path / "vmm.json"
    args = [str(DRIVER), str(src), str(truth), "3", "250", str(MEMORY), "2", INTERVAL, "cuda_vmm"]
    got = mmpool("record", "--out", str(out), "--", sys.executable, *args)
    assert (got.returncode, own_stderr(got.stderr)) == (0, ""), got.stderr
    [info] = [json.loads(p.read_text()) for p in out.glob("pool-*.json")]
    assert info["transport"] == "cuda_vmm" and info["complete"] is True
    assert info["code_of"] == ["0.5.22", "0.5.23"]  # 0.5.21 ships another _recycle_chunks
    assert info["layout"] == {"memory_size": MEMORY, "data_start": 0, "control_bytes": 256, "consumers": 2}
    env = {"SGLANG_MM_ITEM_MEM_POOL_RECYCLE_INTERVAL_SEC": INTERVAL}
    flags = ["--transport", "cuda_vmm", "--size", f"{MEMORY}B", "--tp", "2", "--events", "--format", "json"]
    report = json.loads(mmpool("simulate", "--trace", str(out), *flags, env=env).stdout)
    [finding] = [f for f in report["findings"] if f["code"].startswith("record-")]
    assert finding["code"] == "record-replay-matches", finding
    real = json.loads(truth.read_text())
    assert [e["offset"] for e in report["events"]] == real and None in real
