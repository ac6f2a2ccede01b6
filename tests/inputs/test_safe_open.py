"""One rule for every path mmpool reads: regular files only, refused in bounded time otherwise."""

from __future__ import annotations

import contextlib
import os
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

from mmpool_cli.inputs.safe_open import Refused, open_regular
from mmpool_cli.inputs.yamlsrc import read_bytes


@contextlib.contextmanager
def deadline(seconds: float) -> Iterator[None]:
    """Fail instead of hanging: SIGALRM interrupts a blocking open or read."""

    def expired(signum: int, frame: object) -> None:
        raise TimeoutError(f"still blocked after {seconds} s")

    previous = signal.signal(signal.SIGALRM, expired)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def _refused(path: str) -> Refused:
    with deadline(5), pytest.raises(Refused) as info:
        open_regular(path)
    return info.value


def test_a_regular_file_opens_for_blocking_reads(tmp_path: Path) -> None:
    path = tmp_path / "a.bin"
    path.write_bytes(b"\x89PNG" * 1000)
    with open_regular(str(path)) as f:
        assert os.get_blocking(f.fileno())
        assert f.read() == b"\x89PNG" * 1000


def test_a_fifo_without_a_writer_is_refused_at_once(tmp_path: Path) -> None:
    fifo = tmp_path / "pipe.png"
    os.mkfifo(fifo)
    e = _refused(str(fifo))
    assert e.code == "file-not-regular" and e.strerror is None
    assert e.reason.startswith("this is a FIFO (named pipe), not a regular file")


def test_devices_are_never_opened_and_directories_are_not_files(tmp_path: Path) -> None:
    zero = _refused("/dev/zero")
    assert zero.code == "file-not-regular" and "a character device" in zero.reason
    directory = _refused(str(tmp_path))
    assert (directory.code, directory.reason) == ("file-unreadable", "this is a directory, not a file")
    missing = _refused(str(tmp_path / "gone.png"))
    assert missing.code == "file-missing" and missing.strerror == "No such file or directory"
    nul = _refused("a\0b.png")
    assert nul.code == "file-unreadable"


def test_validate_refuses_them_with_the_same_rule(tmp_path: Path) -> None:
    fifo = tmp_path / "mmpool.yaml"
    os.mkfifo(fifo)
    cases = ((str(fifo), "file-not-regular"), ("/dev/zero", "file-not-regular"), (str(tmp_path), "file-unreadable"))
    for path, code in cases:
        with deadline(5):
            raw, problem = read_bytes(path)
        assert raw is None and problem is not None
        assert (problem.code, problem.message) == (code, _refused(path).reason)
