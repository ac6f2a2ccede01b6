"""vLLM 0.34.0's own multimodal caches recorded on the CPU, and the recording replayed through ``mmpool cache``.

``vllm_cache_program.py`` drives vLLM's real classes (the processor cache's senders built by its
``factories.py``, its processor's ``_merge_mm_kwargs``, the engine core's receiver, the
``EncoderCacheManager``) and prints what they counted. vLLM's modules come from its unpacked wheel
(``$MMPOOL_VLLM_SRC``, default where ``scripts/gen_vllm_tables.py`` unpacks it) and their dependencies
(``$MMPOOL_VLLM_DEPS``, a ``pip install --target`` folder: docs/development.md); without them, or
without torch, the tests skip.
"""

from __future__ import annotations

import importlib.util
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
import fake_vllm  # noqa: E402
from said import own_stderr  # noqa: E402

from mmpool_cli._record.mmpool_record import recfmt
from mmpool_cli.engines.vllm import cache_recording
from mmpool_cli.traces.record_stream import read_caches

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
PROGRAM = HERE / "vllm_cache_program.py"
SRC = Path(os.environ.get("MMPOOL_VLLM_SRC", "/tmp/mmpool-vllm-wheels/0.34.0/src"))
DEPS = Path(os.environ.get("MMPOOL_VLLM_DEPS", "/tmp/vllm-deps"))
SIZE, OTHER, BUDGET = 20_000_000, 7_000_000, 3000
pytestmark = [
    pytest.mark.skipif(
        not (SRC / "vllm" / "multimodal" / "cache" / "factories.py").is_file() or not (DEPS / "cachetools").is_dir(),
        reason="vLLM 0.34.0's unpacked wheel and its dependencies are not here ($MMPOOL_VLLM_SRC, $MMPOOL_VLLM_DEPS)",
    ),
    pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="torch is not installed"),
    pytest.mark.skipif(importlib.util.find_spec("prometheus_client") is None, reason="no prometheus_client"),
]


def run(kind: str, size: int, out: Path | None = None, port: int | None = None, src: Path = SRC) -> dict[str, object]:
    """The program's counts, run plain or under ``mmpool record --out out`` (serving its series at ``port``)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("VLLM_") and k.lower() != "prometheus_multiproc_dir"}
    env |= {"PYTHONPATH": f"{src}{os.pathsep}{DEPS}", "CUDA_VISIBLE_DEVICES": "", "VLLM_TARGET_DEVICE": "cpu"}
    head = [] if out is None else [sys.executable, "-m", "mmpool_cli", "record", "--out", str(out)]
    head += [] if port is None else ["--metrics-port", str(port)]
    head += [] if out is None else ["--"]
    done = subprocess.run(
        [*head, sys.executable, str(PROGRAM), str(ROOT / "scripts"), kind, str(size), str(BUDGET)],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        timeout=600,
        check=False,
    )
    said = done.stderr if out is None else own_stderr(done.stderr)  # what mmpool record adds last, taken off
    assert (done.returncode, said) == (0, "")  # nothing said: every class was recognised
    if out is not None:
        deadline = time.monotonic() + 30
        while (out / "follow.pid").exists() and time.monotonic() < deadline:
            time.sleep(0.05)
    return json.loads(done.stdout)  # type: ignore[no-any-return]


def counted(events: list[tuple[int, int, int, int, int]], kind: int) -> list[tuple[int, int, int, int, int]]:
    return [e for e in events if e[1] == kind]


@pytest.mark.parametrize("kind", ["lru", "shm", "processor_only"])
def test_a_recording_of_vllms_caches_replays_to_vllms_own_hits(tmp_path: Path, kind: str) -> None:
    out = tmp_path / "rec"
    truth = run(kind, SIZE, out)
    senders = truth["senders"]
    assert isinstance(senders, list)
    assert sum(s["failed"] for s in senders) == 0 and sum(s["hits"] for s in senders) > 0

    caches = read_caches(str(out), 10**6)
    processor = [c for c in caches if c.info[recfmt.K_CACHE] == "vllm_processor"]
    [encoder] = [c for c in caches if c.info[recfmt.K_CACHE] == "vllm_encoder"]
    # one sender per API process; the second processor_only one was spawned, and recorded in its own stream
    assert len(processor) == len(senders) == len({c.info[recfmt.K_PID] for c in processor})
    for c in processor:
        assert c.info[recfmt.K_CACHE_TYPE] == kind and c.info[recfmt.K_CACHE_BYTES] == SIZE
        assert "0.34.0" in c.info[recfmt.K_CODE_OF]
    processor.sort(key=lambda c: c.info[recfmt.K_T0])  # the program's own sender starts first
    for c, s in zip(processor, senders, strict=True):
        lookups = counted(c.events, recfmt.CACHE_LOOKUP)
        assert (len(lookups), sum(e[3] for e in lookups)) == (s["total"], s["hits"])  # vLLM's make_stats

    # the recording replayed by mmpool cache: at the recorded size, vLLM's hits
    report = fake_vllm.replayed(out)
    cache, encoder_result = report["caches"]
    assert (cache["name"], cache["size_bytes"]) == ("processor", SIZE)
    assert (cache["hits"], cache["lookups"]) == (sum(s["hits"] for s in senders), sum(s["total"] for s in senders))
    assert not [n for n in report["findings"] if n["code"] == "cache-replay-differs"]
    assert cache["recommended_setting"].startswith("--mm-processor-cache-gb ")

    # the encoder cache's records are what the manager answered
    enc = truth["encoder"]
    assert isinstance(enc, dict)
    assert encoder.info[recfmt.K_CACHE_UNIT] == "tokens" and encoder.info[recfmt.K_CACHE_BYTES] == BUDGET
    lookups = counted(encoder.events, recfmt.CACHE_LOOKUP)
    inserted = counted(encoder.events, recfmt.CACHE_INSERT)
    assert (len(lookups), sum(e[3] for e in lookups)) == (enc["lookups"], enc["hits"])
    assert len(counted(encoder.events, recfmt.CACHE_WAIT)) == enc["waits"] > 0
    assert (len(inserted), max(e[4] for e in inserted)) == (enc["allocated"], enc["peak"])
    # and replayed at other budgets over the requests the processor caches saw, in tokens
    assert (encoder_result["name"], encoder_result["unit"], encoder_result["size_tokens"]) == (
        "encoder",
        "tokens",
        BUDGET,
    )
    assert encoder_result["recommended_setting"] == f"--max-num-batched-tokens {encoder_result['recommended_tokens']}"
    assert len(encoder_result["curve"]) > 10 and "size_bytes" not in encoder_result
    codes = {n["code"] for n in report["findings"]}
    assert {"encoder-cache-recorded", "encoder-cache-waits"} <= codes


@pytest.mark.parametrize("kind", ["lru", "shm"])
def test_the_recording_replayed_at_another_size_makes_what_vllm_makes_there(tmp_path: Path, kind: str) -> None:
    out = tmp_path / "rec"
    run(kind, SIZE, out)
    senders = [
        cache_recording.sender(c) for c in read_caches(str(out), 10**6) if c.info[recfmt.K_CACHE] == "vllm_processor"
    ]
    there = run(kind, OTHER)["senders"]
    assert isinstance(there, list)
    assert cache_recording._replay(senders, OTHER)[0] == sum(s["hits"] for s in there)


def test_the_caches_series_are_what_vllms_caches_did(tmp_path: Path) -> None:
    out = tmp_path / "rec"
    with socket.socket() as sock:  # a port nothing listens on now
        sock.bind(("127.0.0.1", 0))
        port = int(sock.getsockname()[1])
    truth = run("lru", SIZE, out, port)
    from prometheus_client.multiprocess import MultiProcessCollector

    got = {
        (s.name, s.labels["cache"]): s.value
        for f in MultiProcessCollector(None, path=str(out / "metrics.d")).collect()
        for s in f.samples
        if s.name.startswith("mmpool_cache_")
    }
    [sender] = truth["senders"]  # type: ignore[misc]
    enc = truth["encoder"]
    assert isinstance(enc, dict)
    assert got[("mmpool_cache_lookups_total", "vllm_processor")] == sender["total"]
    assert got[("mmpool_cache_hits_total", "vllm_processor")] == sender["hits"]
    assert got[("mmpool_cache_capacity_bytes", "vllm_processor")] == SIZE
    assert got[("mmpool_cache_lookups_total", "vllm_encoder")] == enc["lookups"]
    assert got[("mmpool_cache_hits_total", "vllm_encoder")] == enc["hits"]
    assert got[("mmpool_cache_waits_total", "vllm_encoder")] == enc["waits"]
    assert got[("mmpool_cache_capacity_tokens", "vllm_encoder")] == BUDGET
    assert got[("mmpool_cache_insertions_total", "vllm_encoder")] == enc["allocated"]
    # the encoder cache's sizes are tokens: never a _bytes series
    assert not [name for name, cache in got if cache == "vllm_encoder" and "bytes" in name]


@pytest.mark.parametrize("release", ["0.30.0", "0.31.0", "0.32.0", "0.33.0"])
def test_every_release_is_recognised_and_replays_to_its_own_hits(tmp_path: Path, release: str) -> None:
    """The older releases' unpacked wheels beside 0.34.0's (as scripts/gen_vllm_tables.py keeps them)."""
    src = SRC.parent.parent / release / "src"
    if not (src / "vllm" / "v1" / "core" / "encoder_cache_manager.py").is_file():
        pytest.skip(f"vLLM {release}'s unpacked wheel is not beside 0.34.0's ({src})")
    out = tmp_path / "rec"
    truth = run("lru", SIZE, out, src=src)
    [sender] = truth["senders"]  # type: ignore[misc]
    report = fake_vllm.replayed(out)
    # its rules: those of the releases whose code the hook recognised (here no vLLM is installed to name one)
    code_of = {str(r) for c in read_caches(str(out), 10**6) for r in c.info[recfmt.K_CODE_OF]}
    assert release in code_of and report["engine"].removeprefix("vLLM ") in code_of
    assert (report["caches"][0]["hits"], report["caches"][0]["lookups"]) == (sender["hits"], sender["total"])
