"""A damaged recording, on every command that reads it: each damaged file named, one line each, never silent.

The pools are recorded by the hook itself (``tests/record/fake_sglang.py``'s stand-in pool in a main,
a forked and a spawned process: three streams), then damaged as a crash or a careless copy does.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "record"))
import fake_sglang  # noqa: E402
from streams import HEAD, SIZE, cache_recording  # noqa: E402

from mmpool_cli._record.mmpool_record import recfmt  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Three pools recorded whole, with the run's manifest that mmpool record writes."""
    root = tmp_path_factory.mktemp("recorded")
    tree = fake_sglang.tree(root / "tree")
    env = {k: v for k, v in os.environ.items() if not k.startswith("MMPOOL_RECORD")}
    env["PYTHONPATH"] = os.pathsep.join([str(fake_sglang.RECORD_DIR), str(tree)])
    env |= {"MMPOOL_RECORD": str(root / "rec"), "MMPOOL_RECORD_DIGESTS": str(fake_sglang.digests(root))}
    done = subprocess.run(
        [sys.executable, str(tree / "program.py"), "120", "children"], env=env, capture_output=True, timeout=120
    )
    assert done.returncode == 3, done.stderr
    run = {"format": recfmt.RUN_FORMAT, "mmpool": "0", "command": ["python", "program.py"], "started_unix_ns": 1}
    (root / "rec" / recfmt.RUN_MANIFEST).write_text(json.dumps(run))
    return root / "rec"


@pytest.fixture
def rec(recorded: Path, tmp_path: Path) -> Path:
    copy = tmp_path / "rec"
    shutil.copytree(recorded, copy)
    return copy


def mmpool(*args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MMPOOL_", "SGLANG_", "SGL_"))}
    return subprocess.run(
        [sys.executable, "-m", "mmpool_cli", *args], cwd=ROOT, capture_output=True, text=True, env=env, timeout=120
    )


def streams(rec: Path) -> list[Path]:
    return sorted(rec.glob("events-*.bin"))


def damage(rec: Path) -> list[str]:
    """One stream cut inside a record, one emptied, the run's manifest cut short: the lines that name them."""
    cut, emptied, _ = streams(rec)
    at = HEAD + 100 * SIZE
    cut.write_bytes(cut.read_bytes()[: at + 30])
    emptied.write_bytes(b"")
    run = rec / recfmt.RUN_MANIFEST
    run.write_bytes(run.read_bytes()[:50])
    return [
        f"{run}: not the run's manifest that mmpool record wrote (not JSON: ",
        f"{cut}: cut inside a record at byte {at:,} of {at + 30:,}: the 100 records before it are read, the 30 "
        "bytes after are not, and its process's END record is missing",
        f"{emptied}: empty (0 bytes): none of its events are read",
    ]


def test_trace_from_a_damaged_recording_names_each_file_and_exits_1(rec: Path, tmp_path: Path) -> None:
    whole = mmpool("trace", "--from", str(rec), "-o", str(tmp_path / "whole.jsonl"))
    assert whole.returncode == 0, whole.stderr
    named = damage(rec)
    got = mmpool("trace", "--from", str(rec), "-o", str(tmp_path / "part.jsonl"))
    assert got.returncode == 1, got.stderr
    lines = got.stderr.splitlines()
    assert len(lines) == 4, got.stderr
    for line, start in zip(lines, named, strict=False):
        assert line.startswith(f"mmpool trace: warning: {start}"), line
    written = len((tmp_path / "part.jsonl").read_text().splitlines()) - 1  # the recording's layout first
    assert 0 < written < len((tmp_path / "whole.jsonl").read_text().splitlines()) - 1
    assert lines[3] == (
        f"mmpool trace: {written:,} events of 3 pools from {rec}, written from a damaged recording: 3 of its files "
        "(above) are not whole"
    )


def test_simulate_of_a_damaged_recording_names_each_file(rec: Path, run_line) -> None:
    named = damage(rec)
    result = run_line(["mmpool", "simulate", "--trace", str(rec), "--format", "json"])
    findings = json.loads(result.stdout)["findings"]
    found = [f["message"] for f in findings if f["code"] == "record-damaged"]
    assert [f["severity"] for f in findings if f["code"] == "record-damaged"] == ["warning"] * 3
    assert len(found) == 3 and all(m.startswith(s) for m, s in zip(found, named, strict=True)), found
    [compared] = [f for f in findings if f["code"] == "record-not-compared"]
    assert compared["severity"] == "warning" and "did not end cleanly" in compared["message"]


def test_every_stream_emptied_is_refused_naming_the_damage(rec: Path) -> None:
    for path in streams(rec):
        path.write_bytes(b"")
    first = streams(rec)[0]
    for args in (["trace", "--from", str(rec)], ["simulate", "--trace", str(rec)]):
        got = mmpool(*args)
        assert (got.returncode, got.stdout) == (2, ""), args
        assert got.stderr == (
            f"mmpool: error: {rec}: no events to read: {first}: empty (0 bytes): none of its events are read "
            "(and 2 more damaged files)\n"
        ), args


def test_cache_of_a_cache_stream_that_stops_early_names_it(tmp_path: Path, run_line) -> None:
    path = cache_recording(tmp_path, end=False)
    result = run_line(["mmpool", "cache", "--trace", str(tmp_path), "--format", "json"])
    findings = json.loads(result.stdout)["findings"]
    assert [(f["code"], f["severity"], f["message"]) for f in findings if f["code"] == "record-damaged"] == [
        (
            "record-damaged",
            "warning",
            f"{path}: ends at byte {path.stat().st_size:,} without the END record its process writes when it ends "
            "cleanly (it was killed or is still running, or the file was cut)",
        )
    ]
