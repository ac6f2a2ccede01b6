"""mmpool record and check --exec --record: the command runs in mmpool's place, with the same output and status."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PROGRAM = "import os, sys\nprint('pid', os.getpid(), sys.argv[1:])\nprint('err', file=sys.stderr)\nsys.exit(4)\n"


def mmpool(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    full = {k: v for k, v in os.environ.items() if not k.startswith(("MMPOOL_", "SGLANG_", "SGL_"))}
    full.update(env or {})
    return subprocess.run(
        [sys.executable, "-m", "mmpool_cli", *args], cwd=ROOT, capture_output=True, text=True, env=full, check=False
    )


def test_record_execs_the_command_same_pid_output_and_status(tmp_path: Path) -> None:
    program = tmp_path / "p.py"
    program.write_text(PROGRAM.replace("'pid', os.getpid(), ", "'ppid', os.getppid() > 0, "))
    plain = subprocess.run([sys.executable, str(program), "a"], capture_output=True, text=True, check=False)
    got = mmpool("record", "--out", str(tmp_path / "rec"), "--", sys.executable, str(program), "a")
    assert (got.returncode, got.stdout) == (plain.returncode, plain.stdout) == (4, "ppid True ['a']\n")
    assert sorted(p.name for p in (tmp_path / "rec").iterdir()) == ["recording.json"]  # no SGLang, no pool
    # the command's own stderr, then, once it ended, what was recorded: here nothing, which a user learns now
    assert got.stderr == plain.stderr + (
        f"mmpool record: warning: nothing was recorded in {tmp_path / 'rec'}: the command made no pool or "
        "multimodal cache of SGLang or vLLM in a Python process the hook reached (docs/record.md, How it loads)\n"
    )


def test_record_keeps_the_process_id(tmp_path: Path) -> None:
    program = tmp_path / "p.py"
    program.write_text("import os\nprint(os.getpid())\n")
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "mmpool_cli",
            "record",
            "--out",
            str(tmp_path / "r"),
            "--",
            sys.executable,
            str(program),
        ],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
    )
    out, _ = proc.communicate(timeout=60)
    assert out == f"{proc.pid}\n" and proc.returncode == 0


def test_bad_input_stops_before_the_command(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    (tmp_path / "f").write_text("")
    got = mmpool("record", "--out", str(tmp_path / "f"), "--", "sh", "-c", f"touch {marker}")
    assert (got.returncode, got.stdout) == (2, "")
    assert (
        got.stderr
        == f"mmpool: error: --out {tmp_path / 'f'}: is a file, not a directory; give a directory for the recording\n"
    )
    got = mmpool(
        "record", "--out", str(tmp_path / "r"), "--max-bytes", "12 parsecs", "--", "sh", "-c", f"touch {marker}"
    )
    assert got.returncode == 2 and got.stderr.startswith("mmpool: error: --max-bytes: ")
    assert not marker.exists()


def test_check_exec_record(tmp_path: Path) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    exe = bin_dir / "sglang"
    exe.write_text('#!/bin/sh\necho "$MMPOOL_RECORD" "$PYTHONPATH"\nexit 6\n')
    exe.chmod(0o755)
    env = {"PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"}
    out = tmp_path / "rec"
    got = mmpool("check", "--exec", "--record", str(out), "--", "sglang", "serve", "m", env=env)
    assert got.returncode == 6, got.stderr
    recorded, path = got.stdout.split()
    assert recorded == str(out) and path.endswith(os.path.join("mmpool_cli", "_record"))
    assert (out / "recording.json").exists()
    refused = mmpool("check", "--record", str(out), "--", "sglang", "serve", "m", env=env)
    assert (refused.returncode, refused.stderr) == (
        2,
        "mmpool: error: --record records the launch that --exec runs: add --exec\n",
    )


def test_trace_from_record_writes_the_merged_trace(tmp_path: Path) -> None:
    rec = tmp_path / "rec"
    rec.mkdir()
    (rec / "pool-5-0.jsonl").write_text(
        '{"t": 0.01, "op": "alloc", "id": "0", "bytes": 100, "offset": 256}\n{"t": 0.05, "op": "free", "id": "0", "tick": 1}\n'
    )
    layout = {"memory_size": 1 << 20, "data_start": 256, "slots": 4096, "consumers": 1}
    manifest = {"format": 1, "file": "pool-5-0.jsonl", "pid": 5, "pool": 0, "transport": "cuda_ipc"}
    manifest |= {"layout": layout, "recycle_interval_s": 0.05, "t0_monotonic_ns": 0}
    (rec / "pool-5-0.json").write_text(json.dumps(manifest))
    got = mmpool("trace", "--from-format", "record", str(rec), "-o", str(tmp_path / "merged.jsonl"))
    assert (got.returncode, got.stdout, got.stderr) == (0, "", f"mmpool trace: 2 events of 1 pool from {rec}\n")
    assert (tmp_path / "merged.jsonl").read_text() == (
        '{"recording": {"pools": 1, "transport": "cuda_ipc", "layout": {"memory_size": 1048576, "data_start": 256, '
        '"slots": 4096, "consumers": 1}, "recycle_interval_s": 0.05}}\n'
        '{"t": 0.010000000, "op": "alloc", "id": "5-0:0", "bytes": 100, "worker": 0, "offset": 256}\n'
        '{"t": 0.050000000, "op": "free", "id": "5-0:0"}\n'
    )
    auto = mmpool("trace", "--from", str(rec), "-o", str(tmp_path / "auto.jsonl"))  # a directory is a recording
    assert (auto.returncode, (tmp_path / "auto.jsonl").read_text()) == (0, (tmp_path / "merged.jsonl").read_text())
    again = mmpool("trace", "--from-format", "record", str(rec), "-o", str(tmp_path / "merged.jsonl"))
    assert again.returncode == 2 and "exists; mmpool never overwrites a file" in again.stderr
    for flags in (["--workers", "1"], ["--model", "qwen2.5-vl"], ["--tp", "2"], ["--assume-image", "64x64"]):
        refused = mmpool("trace", "--from-format", "record", str(rec), *flags)  # a flag of the conversion: never ignored
        assert (refused.returncode, refused.stdout) == (2, ""), flags
        assert refused.stderr == (
            f"mmpool: error: {flags[0]} describes traffic to convert; a recording is written as its "
            "pools leased it (worker i the i-th pool, the bytes they leased): drop it (mmpool simulate --trace DIR "
            "--workers N replays it at another layout)\n"
        )


def test_trace_from_record_of_no_directory_says_so(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("")
    for path, what in ((tmp_path / "none", "no such directory"), (tmp_path / "file", "is a file, not a directory")):
        got = mmpool("trace", "--from-format", "record", str(path))
        assert (got.returncode, got.stdout) == (2, ""), got.stderr
        assert got.stderr == (
            f"mmpool: error: {path}: {what}; give the directory of a recording (mmpool record --out DIR)\n"
        )
    old = mmpool("trace", "--from", "record", str(tmp_path / "none"))  # the old spelling: the same, and a warning
    assert old.returncode == 2 and old.stderr.splitlines()[0].startswith("mmpool: warning: --from record is the old")
    assert old.stderr.splitlines()[1].endswith("no such directory; give the directory of a recording (mmpool record --out DIR)")



def test_record_says_what_it_recorded(tmp_path: Path) -> None:
    sys.path.insert(0, str(ROOT / "tests" / "record"))
    import fake_sglang

    tree = fake_sglang.tree(tmp_path / "tree")
    env = {"PYTHONPATH": str(tree), "MMPOOL_RECORD_DIGESTS": str(fake_sglang.digests(tmp_path))}
    out = tmp_path / "rec"
    got = mmpool("record", "--out", str(out), "--", sys.executable, str(tree / "program.py"), "40", "children", env=env)
    assert got.returncode == 3, got.stderr
    events = sum((p.stat().st_size - 48) // 48 for p in out.glob("events-*.bin"))
    records = 3 * (1 + 1)  # each stream's REGISTER and END are not events
    assert got.stderr == f"mmpool record: recorded in {out}: 3 pools, 0 caches, {events - records:,} events\n"
