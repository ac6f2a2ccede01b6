"""mmpool_record's hook in real child processes: off unless asked, untouched when unknown, never in the way."""

from __future__ import annotations

import glob
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
import fake_sglang  # noqa: E402

from mmpool_cli.traces.events import ALLOC, FREE  # noqa: E402
from mmpool_cli.traces.record_stream import PoolTrace  # noqa: E402
from mmpool_cli.traces.recording import read_pools  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
ITEMS = 40


def run(
    tmp: Path, *args: str, env: dict[str, str] | None = None, hook: bool = True
) -> subprocess.CompletedProcess[str]:
    """The stand-in's program, with the hook's directory first on PYTHONPATH (as mmpool record puts it)."""
    full = {k: v for k, v in os.environ.items() if not k.startswith("MMPOOL_RECORD")}
    paths = [str(fake_sglang.RECORD_DIR)] if hook else []
    full["PYTHONPATH"] = os.pathsep.join([*paths, str(tmp)])
    full.update(env or {})
    return subprocess.run(
        [sys.executable, str(tmp / "program.py"), *args],
        capture_output=True,
        text=True,
        env=full,
        timeout=120,
        check=False,
    )


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    return fake_sglang.tree(tmp_path / "tree")


def pools(out: Path) -> list[dict[str, object]]:
    return [json.loads(p.read_text()) for p in sorted(out.glob("pool-*.json"))]


def traces(out: Path) -> list[PoolTrace]:
    """Each pool's trace as mmpool reads it back, in the order the pools started."""
    return read_pools(str(out))


def offsets(trace: PoolTrace) -> list[str]:
    return ["miss" if e[4] is None else str(e[4]) for e in trace.events if e[1] == ALLOC]


def test_without_record_the_program_is_unchanged(tree: Path) -> None:
    plain = run(tree, str(ITEMS), hook=False)
    assert plain.returncode == 3 and plain.stdout.startswith("main ")
    on_path = run(tree, str(ITEMS))  # the bootstrap on the path, MMPOOL_RECORD unset: nothing at all
    assert (on_path.returncode, on_path.stdout, on_path.stderr) == (3, plain.stdout, plain.stderr)


def test_unknown_code_is_untouched_said_in_one_line(tree: Path, tmp_path: Path) -> None:
    plain = run(tree, str(ITEMS), hook=False)
    out = tmp_path / "rec"
    got = run(tree, str(ITEMS), env={"MMPOOL_RECORD": str(out)})
    assert (got.returncode, got.stdout) == (3, plain.stdout)
    lines = got.stderr.splitlines()
    assert len(lines) == 1, got.stderr
    assert lines[0].startswith(f"mmpool record: {fake_sglang.MODULE}: StreamOrderedMmFeaturePool.__init__ is code ")
    assert "not recorded" in lines[0]
    assert not list(out.glob("pool-*"))


def test_no_sglang_at_all(tmp_path: Path) -> None:
    (tmp_path / "program.py").write_text("import sys\nprint('hello', sys.argv[1:])\nsys.exit(5)\n")
    plain = run(tmp_path, "a", hook=False)
    got = run(tmp_path, "a", env={"MMPOOL_RECORD": str(tmp_path / "rec")})
    assert (got.returncode, got.stdout, got.stderr) == (5, plain.stdout, plain.stderr) == (5, "hello ['a']\n", "")


def test_image_sitecustomize_still_runs(tmp_path: Path) -> None:
    (tmp_path / "sitecustomize.py").write_text("import builtins\nbuiltins.IMAGE_HOOK = 'ran'\n")
    (tmp_path / "program.py").write_text("import builtins\nprint(builtins.IMAGE_HOOK)\n")
    got = run(tmp_path, env={"MMPOOL_RECORD": str(tmp_path / "rec")})
    assert (got.returncode, got.stdout) == (0, "ran\n")


def test_known_pool_recorded_in_main_forked_and_spawned_processes(tree: Path, tmp_path: Path) -> None:
    plain = run(tree, str(ITEMS), "children", hook=False)
    out = tmp_path / "rec"
    env = {"MMPOOL_RECORD": str(out), "MMPOOL_RECORD_DIGESTS": str(fake_sglang.digests(tmp_path))}
    got = run(tree, str(ITEMS), "children", env=env)
    assert (got.returncode, got.stdout, got.stderr) == (3, plain.stdout, "")
    found = traces(out)
    assert len({p.info["pid"] for p in found}) == 3  # the main process, the forked child, the spawned one
    lines = {line.split(" ", 1)[0]: line.split()[1:] for line in plain.stdout.splitlines()}
    for trace in found:
        info = trace.info
        assert info["complete"] is True and info["dropped"] == 0 and info["errors"] == 0 and trace.complete
        assert info["code_of"] == ["stand-in"] and info["layout"] == {
            "memory_size": 1 << 20,
            "data_start": 256,
            "slots": 64,
            "consumers": 1,
        }
        assert offsets(trace) == lines["main"]  # each drives the same
        misses = {e[2] for e in trace.events if e[1] == ALLOC and e[4] is None}
        frees = [e for e in trace.events if e[1] == FREE and e[2] not in misses]
        assert len(frees) == 8 * 3  # every fifth item gives three leases back: the tick's releases


def test_full_buffer_drops_and_counts_never_blocks(tree: Path, tmp_path: Path) -> None:
    plain = run(tree, "2000", hook=False)
    out = tmp_path / "rec"
    env = {
        "MMPOOL_RECORD": str(out),
        "MMPOOL_RECORD_DIGESTS": str(fake_sglang.digests(tmp_path)),
        "MMPOOL_RECORD_BUFFER": "4",
    }
    got = run(tree, "2000", env=env)
    assert (got.returncode, got.stdout) == (3, plain.stdout)
    [info] = pools(out)
    assert info["dropped"] > 0 and info["complete"] is False
    assert got.stderr.splitlines() == [
        f"mmpool record: {info['dropped']} events dropped (the buffer of 4 was full); this process's trace is "
        "incomplete, its pool-*.json say so"
    ]


def test_hook_failure_counted_said_once_program_unaffected(tree: Path, tmp_path: Path) -> None:
    plain = run(tree, str(ITEMS), hook=False)
    out = tmp_path / "rec"
    env = {"MMPOOL_RECORD": str(out), "MMPOOL_RECORD_DIGESTS": str(fake_sglang.digests(tmp_path)), "SABOTAGE": "1"}
    got = run(tree, str(ITEMS), env=env)
    assert (got.returncode, got.stdout) == (3, plain.stdout)
    [line] = got.stderr.splitlines()
    assert line.startswith("mmpool record: the hook failed (TypeError: ") and "the program is unaffected" in line


def test_rotation_every_part_reads_alone_and_all_read_as_unrotated(tree: Path, tmp_path: Path) -> None:
    base = {"MMPOOL_RECORD_DIGESTS": str(fake_sglang.digests(tmp_path))}
    whole, rotated = tmp_path / "whole", tmp_path / "rotated"
    plain = run(tree, "400", env={**base, "MMPOOL_RECORD": str(whole)})
    env = {**base, "MMPOOL_RECORD": str(rotated), "MMPOOL_RECORD_MAX_BYTES": "4096", "PAUSE": "0.01"}
    got = run(tree, "400", env=env)
    assert (got.returncode, got.stdout, got.stderr) == (3, plain.stdout, "")
    parts = sorted(rotated.glob("events-*.bin"))
    assert len(parts) >= 3 and len(list(whole.glob("events-*.bin"))) == 1
    [one], [all_parts] = traces(whole), traces(rotated)
    assert all_parts.parts == len(parts) and all_parts.whole and all_parts.complete
    assert offsets(all_parts) == offsets(one) == plain.stdout.split()[1:]
    shape = [(op, key, nbytes, offset) for _, op, key, nbytes, offset in all_parts.events]
    assert shape == [(op, key, nbytes, offset) for _, op, key, nbytes, offset in one.events]
    for part in parts[1:]:  # each part alone, with the manifests: a trace of its own, its leases in flight first
        alone = tmp_path / f"alone-{part.name}"
        alone.mkdir()
        for f in rotated.glob("pool-*.json"):
            shutil.copy(f, alone)
        shutil.copy(part, alone)
        [trace] = traces(alone)
        assert not trace.whole and trace.events
        live: set[str] = set()
        for _, op, key, _, _ in trace.events:
            assert (key in live) == (op == FREE)
            live.symmetric_difference_update({key})


def test_malformed_setting_records_nothing(tree: Path, tmp_path: Path) -> None:
    plain = run(tree, str(ITEMS), hook=False)
    got = run(tree, str(ITEMS), env={"MMPOOL_RECORD": str(tmp_path / "rec"), "MMPOOL_RECORD_MAX_BYTES": "lots"})
    assert (got.returncode, got.stdout) == (3, plain.stdout)
    assert got.stderr.startswith("mmpool record: nothing is recorded: ")


@pytest.mark.parametrize("version", ["3.10", "3.12", "3.13"])
def test_the_hook_runs_in_the_servers_own_python(tree: Path, tmp_path: Path, version: str) -> None:
    found = [
        shutil.which(f"python{version}"),
        *glob.glob(os.path.expanduser(f"~/.pyenv/versions/{version}.*/bin/python")),
    ]
    python = next((p for p in found if p and subprocess.run([p, "-c", ""], capture_output=True).returncode == 0), None)
    if python is None:
        pytest.skip(f"no python{version} here")
    full = {k: v for k, v in os.environ.items() if not k.startswith("MMPOOL_RECORD")}
    full["PYTHONPATH"] = str(tree)
    program = [python, str(tree / "program.py"), str(ITEMS)]
    plain = subprocess.run(program, capture_output=True, text=True, env=full, timeout=120, check=False)
    out = tmp_path / "rec"
    full["PYTHONPATH"] = os.pathsep.join([str(fake_sglang.RECORD_DIR), str(tree)])
    full.update({"MMPOOL_RECORD": str(out), "MMPOOL_RECORD_DIGESTS": str(fake_sglang.digests(tmp_path))})
    got = subprocess.run(program, capture_output=True, text=True, env=full, timeout=120, check=False)
    assert (got.returncode, got.stdout, got.stderr) == (3, plain.stdout, plain.stderr)
    [trace] = traces(out)
    assert trace.info["complete"] is True and len(offsets(trace)) == ITEMS
