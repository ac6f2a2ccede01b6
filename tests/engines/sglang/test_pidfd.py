"""The GPU-free pidfd_getfd check: a real run between siblings, and how errors read."""

from __future__ import annotations

import errno
import os

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


def test_real_check_answers_and_reaps_its_children() -> None:
    before = _children()
    result = check_pidfd_getfd()
    assert result.allowed in (True, False, None)
    assert result.detail
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
