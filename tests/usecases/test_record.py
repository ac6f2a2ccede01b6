"""usecases.record: every bad input refused before the command starts, and the environment it runs with."""

from __future__ import annotations

import json
import os
import socket
from pathlib import Path

import pytest

from mmpool_cli.errors import MmpoolError
from mmpool_cli.usecases.record import HOOK_DIR, RecordRequest, prepare

ENV = {"PATH": os.environ.get("PATH", os.defpath), "PYTHONPATH": "/opt/image/lib"}


def test_environment_loads_the_hook_first_and_carries_the_settings(tmp_path: Path) -> None:
    out = tmp_path / "rec"
    launch = prepare(RecordRequest(str(out), ["true", "x"], max_bytes=1 << 20, metrics_port=None), ENV)
    assert launch.argv == ["true", "x"] and os.path.basename(launch.program) == "true"
    assert launch.environ["PYTHONPATH"] == f"{HOOK_DIR}{os.pathsep}/opt/image/lib"
    assert (Path(HOOK_DIR) / "sitecustomize.py").exists() and (Path(HOOK_DIR) / "mmpool_record" / "hook.py").exists()
    assert launch.environ["MMPOOL_RECORD"] == str(out)
    assert launch.environ["MMPOOL_RECORD_MAX_BYTES"] == "1048576"
    assert "MMPOOL_RECORD_METRICS_PORT" not in launch.environ
    manifest = json.loads((out / "recording.json").read_text())
    assert manifest["command"] == ["true", "x"] and manifest["max_bytes"] == 1 << 20


def refused(tmp_path: Path, request: RecordRequest) -> str:
    with pytest.raises(MmpoolError) as e:
        prepare(request, ENV)
    assert "\n" not in str(e.value)
    return str(e.value)


def test_out_on_a_file(tmp_path: Path) -> None:
    (tmp_path / "f").write_text("mine")
    message = refused(tmp_path, RecordRequest(str(tmp_path / "f"), ["true"]))
    assert message == f"--out {tmp_path / 'f'}: is a file, not a directory; give a directory for the recording"
    assert (tmp_path / "f").read_text() == "mine"


def test_an_existing_recording_is_never_overwritten(tmp_path: Path) -> None:
    prepare(RecordRequest(str(tmp_path / "rec"), ["true"]), ENV)
    before = (tmp_path / "rec" / "recording.json").read_text()
    message = refused(tmp_path, RecordRequest(str(tmp_path / "rec"), ["true"]))
    assert message == f"--out {tmp_path / 'rec'}: already holds a recording (recording.json); give a new directory"
    assert (tmp_path / "rec" / "recording.json").read_text() == before


def test_out_empty_is_refused_and_writes_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    message = refused(tmp_path, RecordRequest("", ["true"]))
    assert message == "--out: empty; give a new or empty directory for the recording, e.g. --out rec1"
    assert list(tmp_path.iterdir()) == []


def test_a_directory_that_is_not_empty_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "notes.txt").write_text("mine")
    message = refused(tmp_path, RecordRequest(str(tmp_path), ["true"]))
    assert message == f"--out {tmp_path}: is not empty (holds 'notes.txt'); give a new or empty directory"
    monkeypatch.chdir(tmp_path)
    assert refused(tmp_path, RecordRequest(".", ["true"])) == message
    assert [p.name for p in tmp_path.iterdir()] == ["notes.txt"]


def test_an_empty_directory_is_taken(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert prepare(RecordRequest(".", ["true"]), ENV).out == str(tmp_path)
    assert [p.name for p in tmp_path.iterdir()] == ["recording.json"]


def test_a_pool_file_alone_is_a_recording(tmp_path: Path) -> None:
    (tmp_path / "pool-1-0.jsonl").write_text("")
    message = refused(tmp_path, RecordRequest(str(tmp_path), ["true"]))
    assert message == f"--out {tmp_path}: already holds a recording (pool-1-0.jsonl); give a new directory"


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into any directory")
def test_unwritable_directory(tmp_path: Path) -> None:
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o500)
    assert refused(tmp_path, RecordRequest(str(locked), ["true"])) == f"--out {locked}: the directory is not writable"


def test_directory_that_cannot_be_made(tmp_path: Path) -> None:
    (tmp_path / "f").write_text("")
    message = refused(tmp_path, RecordRequest(str(tmp_path / "f" / "rec"), ["true"]))
    assert message.startswith(f"--out {tmp_path / 'f' / 'rec'}: cannot create the directory (")


def test_port_in_use(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("", 0))
        taken.listen()
        port = taken.getsockname()[1]
        message = refused(tmp_path, RecordRequest(str(tmp_path / "rec"), ["true"], metrics_port=port))
    assert message == f"--metrics-port {port}: cannot listen there (Address already in use); choose another"
    assert not (tmp_path / "rec").exists()  # nothing is made before every input passed


def test_port_out_of_range(tmp_path: Path) -> None:
    message = refused(tmp_path, RecordRequest(str(tmp_path / "rec"), ["true"], metrics_port=70000))
    assert message == "--metrics-port: a TCP port from 1 to 65535, not 70000"


def test_command_not_found_or_not_executable(tmp_path: Path) -> None:
    assert refused(tmp_path, RecordRequest(str(tmp_path / "r"), ["no-such-mmpool-cmd"])) == (
        "cannot run 'no-such-mmpool-cmd': no such command on PATH"
    )
    script = tmp_path / "script.sh"
    script.write_text("echo hi\n")
    assert refused(tmp_path, RecordRequest(str(tmp_path / "r"), [str(script)])) == (
        f"cannot run '{script}': it is not an executable file"
    )
    assert refused(tmp_path, RecordRequest(str(tmp_path / "r"), [])).startswith("give the command to record after --")
    assert not (tmp_path / "r").exists()


def test_max_bytes_bounds(tmp_path: Path) -> None:
    message = refused(tmp_path, RecordRequest(str(tmp_path / "r"), ["true"], max_bytes=100))
    assert message == "--max-bytes: from 4096 bytes to 1TiB, not 100"


def test_metrics_port_goes_to_the_process_beside_the_command_not_the_hook(tmp_path: Path) -> None:
    with socket.socket() as probe:
        probe.bind(("", 0))
        port = probe.getsockname()[1]
    environ = {**ENV, "MMPOOL_RECORD_BUFFER": "9", "MMPOOL_RECORD_METRICS_PORT": "1"}
    launch = prepare(
        RecordRequest(str(tmp_path / "rec"), ["true"], metrics_port=port, metrics_addr="127.0.0.1"), environ
    )
    assert (launch.metrics_port, launch.metrics_addr) == (port, "127.0.0.1")
    assert launch.environ["MMPOOL_RECORD_BUFFER"] == "9"  # the user's own settings of the hook are kept


def test_metrics_addr_is_an_address_and_needs_the_port(tmp_path: Path) -> None:
    bad = refused(tmp_path, RecordRequest(str(tmp_path / "r"), ["true"], metrics_port=9, metrics_addr="localhost"))
    assert bad == "--metrics-addr 'localhost': an interface's IP address (127.0.0.1, ::1, 0.0.0.0); default: every one"
    alone = refused(tmp_path, RecordRequest(str(tmp_path / "s"), ["true"], metrics_addr="127.0.0.1"))
    assert alone == "--metrics-addr chooses the interface of --metrics-port: give the port too"
