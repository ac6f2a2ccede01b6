"""The GPU-free pidfd_getfd check: a real run between siblings, and how errors read."""

from __future__ import annotations

import ctypes
import errno
import os
import signal

import pytest

from mmpool_cli.engines.sglang.pidfd import FIXES, _verdict, check_pidfd_getfd


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def _children() -> set[str]:
    """This process's live children (other tests may leave long-lived ones, such as a fork server)."""
    tasks = f"/proc/{os.getpid()}/task"
    kids: set[str] = set()
    for task in os.listdir(tasks):
        with open(f"{tasks}/{task}/children") as f:
            kids |= set(f.read().split())
    return kids


def _a_sibling_moves_a_byte_through_a_taken_descriptor() -> bool | None:
    """Ask the kernel directly: can a process take a sibling's pipe end and write through it?

    The check's oracle, built another way: Python's own ``os.pidfd_open``, and proof by use (the
    byte must arrive through the descriptor taken), not by the syscall's return value.
    None when the answer is neither (an errno other than a refusal).
    """
    read_end, write_end = os.pipe()
    answer_r, answer_w = os.pipe()
    target = os.fork()
    if target == 0:  # holds write_end, as a producer holds its pool's descriptor
        signal.pause()
        os._exit(0)
    taker = os.fork()
    if taker == 0:
        os.close(write_end)  # the byte can reach read_end only through the descriptor taken
        try:
            pidfd = os.pidfd_open(target)
            fd = ctypes.CDLL(None, use_errno=True).syscall(438, pidfd, write_end, 0)  # pidfd_getfd
            if fd < 0:
                os.write(answer_w, b"%d" % ctypes.get_errno())
            else:
                os.write(fd, b"x")
                os.write(answer_w, b"0")
        except OSError as e:
            os.write(answer_w, b"%d" % e.errno)
        os._exit(0)
    os.close(write_end)
    os.close(answer_w)
    try:
        os.waitpid(taker, 0)
        code = int(os.read(answer_r, 16))
    finally:
        os.kill(target, signal.SIGKILL)
        os.waitpid(target, 0)
        os.close(answer_r)
    moved = os.read(read_end, 1) if code == 0 else b""
    os.close(read_end)
    if code == 0:
        return moved == b"x"
    return False if code in (errno.EPERM, errno.EACCES, errno.ENOSYS) else None


@pytest.mark.skipif(not hasattr(os, "pidfd_open"), reason="needs Linux 5.3 and os.pidfd_open")
def test_real_check_answers_as_the_kernel_does_and_reaps_its_children() -> None:
    # a check that asks about the wrong descriptor (EBADF: "unknown") or misreads the answer fails here
    expected = _a_sibling_moves_a_byte_through_a_taken_descriptor()
    before = _children()
    result = check_pidfd_getfd()
    assert result.allowed is expected, result.detail
    if expected is not None:
        assert ("is allowed" in result.detail) is expected
    assert _children() <= before  # no child left behind


@pytest.mark.parametrize(
    ("answer", "scope", "allowed", "needle"),
    [
        ("0", None, True, "allowed"),
        (str(errno.EPERM), 1, False, "Yama ptrace_scope is 1"),
        (str(errno.EPERM), None, False, "CAP_SYS_PTRACE"),
        (str(errno.ENOSYS), None, False, "Linux 5.6"),
        (str(errno.EBADF), None, None, "EBADF"),
        ("", None, None, "did not answer"),
    ],
)
def test_verdicts(answer: str, scope: int | None, allowed: bool | None, needle: str) -> None:
    result = _verdict(answer, scope)
    assert result.allowed is allowed
    assert needle in result.detail


def test_fixes_name_every_way_out() -> None:
    for needle in ("CAP_SYS_PTRACE", "expandable_segments", "--mm-feature-transport cpu"):
        assert needle in FIXES
