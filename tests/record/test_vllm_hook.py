"""The hook's vLLM path on stand-ins for vLLM's cache classes (``fake_vllm``): it runs where vLLM is not installed.

``test_vllm_caches`` records vLLM's own classes where its wheel is at hand; this one checks, everywhere,
that the hook recognises the classes by digest, records what they did, and that ``mmpool cache``
replays the recording to the same hits; and that an unknown class is left alone.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import fake_vllm  # noqa: E402
from said import own_stderr  # noqa: E402

from mmpool_cli._record.mmpool_record import recfmt  # noqa: E402
from mmpool_cli.traces.record_stream import read_caches  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]


def record(tmp: Path, kind: str, known: bool = True) -> tuple[subprocess.CompletedProcess[str], Path]:
    tree, out = fake_vllm.tree(tmp / "tree"), tmp / "rec"
    env = {k: v for k, v in os.environ.items() if not k.startswith("MMPOOL_RECORD")}
    env["PYTHONPATH"] = str(tree)
    if known:
        env["MMPOOL_RECORD_DIGESTS"] = str(fake_vllm.digests(tmp))
    command = [sys.executable, "-m", "mmpool_cli", "record", "--out", str(out), "--"]
    done = subprocess.run(
        [*command, sys.executable, str(tree / "program.py"), kind, "40000", "600"],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        timeout=120,
        check=False,
    )
    deadline = time.monotonic() + 30
    while (out / "follow.pid").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    return done, out


def test_the_stand_ins_are_recorded_and_replay_to_their_own_hits(tmp_path: Path) -> None:
    done, out = record(tmp_path, "processor_only")
    assert (done.returncode, own_stderr(done.stderr)) == (0, "")
    truth = json.loads(done.stdout)
    caches = read_caches(str(out), 10**6)
    [processor] = [c for c in caches if c.info[recfmt.K_CACHE] == "vllm_processor"]
    [encoder] = [c for c in caches if c.info[recfmt.K_CACHE] == "vllm_encoder"]
    assert processor.info[recfmt.K_CACHE_TYPE] == "processor_only" and processor.info[recfmt.K_CACHE_BYTES] == 40000
    lookups = [e for e in processor.events if e[1] == recfmt.CACHE_LOOKUP]
    assert (len(lookups), sum(e[3] for e in lookups)) == (truth["total"], truth["hits"])
    assert sum(e[1] == recfmt.CACHE_REQUEST for e in processor.events) == 82  # one is_cached per request
    assert [e[3] for e in processor.events if e[1] == recfmt.CACHE_INSERT].count(-1) == 2  # "huge", twice
    enc = [e for e in encoder.events if e[1] == recfmt.CACHE_LOOKUP]
    assert (len(enc), sum(e[3] for e in enc)) == (truth["encoder"]["lookups"], truth["encoder"]["hits"])
    assert encoder.info[recfmt.K_CACHE_UNIT] == "tokens"

    report = fake_vllm.replayed(out)
    processor_result, encoder_result = report["caches"]
    assert (processor_result["hits"], processor_result["lookups"]) == (truth["hits"], truth["total"])
    assert not [n for n in report["findings"] if n["code"] == "cache-replay-differs"]
    assert encoder_result["unit"] == "tokens" and encoder_result["size_tokens"] == 600


def test_an_invalidated_entry_is_recorded_as_taken_out(tmp_path: Path) -> None:
    done, out = record(tmp_path, "lru")
    assert (done.returncode, own_stderr(done.stderr)) == (0, "")
    [processor] = [c for c in read_caches(str(out), 10**6) if c.info[recfmt.K_CACHE] == "vllm_processor"]
    assert processor.info[recfmt.K_CACHE_TYPE] == "lru"
    freed = [e for e in processor.events if e[1] == recfmt.CACHE_FREE]
    assert len(freed) == 1 and freed[0][3] > 0  # the entry's bytes


def test_unknown_code_is_left_alone_and_said_once_per_module(tmp_path: Path) -> None:
    done, out = record(tmp_path, "processor_only", known=False)
    assert done.returncode == 0 and json.loads(done.stdout)["hits"] > 0
    *lines, last = done.stderr.splitlines()
    assert len(lines) == 3 and all("is code mmpool does not know" in line for line in lines), lines
    assert last.startswith(f"mmpool record: warning: nothing was recorded in {out}: ")  # and said once it ended
    assert not list(out.glob("cache-*.json"))
