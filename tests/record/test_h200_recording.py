"""Recordings of SGLang 0.5.23's own pools on an H200, replayed: every decision as SGLang made it.

``data/h200/<transport>-64/`` holds what ``benchmarks/record_gpu.py`` produced on the H200 under
``mmpool record`` (benchmarks/README.md, ``## record``, gives the command): two producer processes
publishing real CUDA tensors through SGLang's pool (64 MiB in all: many misses, packed VMM chunks),
two consumer processes rebuilding them over CUDA IPC and acknowledging, the real recycler threads.
``recording/`` is the recording as the hook wrote it; ``truth.json`` is, independently of the hook,
each lease's offset or miss as SGLang's own code returned it to the producer (the proxy's pool
offset), per producer pid in call order. The replay's events are matched to it by pid and serial.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

DATA = Path(__file__).parent / "data" / "h200"


def _replay(run_line, case: Path, truth: dict) -> dict:
    result = run_line(
        [
            "mmpool",
            "simulate",
            "--trace",
            str(case / "recording"),
            "--events",
            "--format",
            "json",
            "--size",
            f"{truth['budget_mib']}MiB",
            "--workers",
            str(truth["workers"]),
            "--tp",
            str(truth["consumers"]),
            "--transport",
            truth["transport"],
        ]  # fmt: skip
    )
    return json.loads(result.stdout)


@pytest.mark.parametrize("name", ["cuda_ipc-64", "cuda_vmm-64"])
def test_replay_gives_sglang_offsets_event_for_event(run_line, name: str) -> None:
    case = DATA / name
    truth = json.loads((case / "truth.json").read_text())
    report = _replay(run_line, case, truth)
    leases = truth["leases"]
    events = report["events"]
    assert len(events) == sum(len(v) for v in leases.values())
    for ev in events:
        pool, serial = ev["id"].rsplit(":", 1)
        assert ev["offset"] == leases[pool.split("-")[0]][int(serial)], ev
    # the small budget missed, SGLang sent those by value; the replay says so for the same leases
    misses = sum(v.count(None) for v in leases.values())
    assert misses > 50
    assert sum(ev["offset"] is None for ev in events) == misses
    assert [f["code"] for f in report["findings"] if f["code"].startswith("record-")] == ["record-replay-matches"]
    assert truth["checksum_mismatches"] == 0  # the consumers read back what the producers wrote


def test_recordings_are_of_both_transports_and_two_workers() -> None:
    seen = {}
    for case in sorted(DATA.iterdir()):
        truth = json.loads((case / "truth.json").read_text())
        pools = [json.loads(p.read_text()) for p in sorted((case / "recording").glob("pool-*.json"))]
        assert {str(p["pid"]) for p in pools} == set(truth["leases"])
        assert {p["transport"] for p in pools} == {truth["transport"]}
        assert all(p["complete"] and p["dropped"] == 0 for p in pools)
        seen[truth["transport"]] = truth
    assert set(seen) == {"cuda_ipc", "cuda_vmm"}
    assert seen["cuda_vmm"]["packed_leases"] > 0  # wrap_tensors' packed chunks, not only single tensors
