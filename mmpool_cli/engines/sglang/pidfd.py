"""A GPU-free check of ``pidfd_getfd(2)`` rights, the syscall CUDA IPC needs with expandable segments.

With ``PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True`` PyTorch allocates through CUDA VMM, and
sharing such memory moves a file descriptor from the producer process with ``pidfd_getfd``. That
needs ptrace rights over the producer (``PTRACE_MODE_ATTACH_REALCREDS``); containers without
``CAP_SYS_PTRACE`` and hosts with Yama ``ptrace_scope`` >= 1 refuse it between sibling processes,
which is what SGLang's scheduler and tokenizer are.

The check reproduces that: two forked siblings, one calling ``pidfd_getfd`` on the other.
Pure core: standard library only; Linux only (elsewhere the answer is "unknown").
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import os
import signal
import sys
from dataclasses import dataclass

# The generic syscall table numbers, shared by x86-64 and arm64 since Linux 5.3/5.6.
_SYS_PIDFD_OPEN = 434
_SYS_PIDFD_GETFD = 438
_TIMEOUT_S = 5.0

FIXES = (
    "run the container with CAP_SYS_PTRACE (docker --cap-add SYS_PTRACE; Kubernetes "
    "securityContext.capabilities.add: [SYS_PTRACE]), or drop expandable_segments from "
    "PYTORCH_CUDA_ALLOC_CONF, or use --mm-feature-transport cpu"
)


@dataclass(frozen=True)
class PidfdCheck:
    """Whether a process may take a sibling's file descriptor; None when it cannot be told."""

    allowed: bool | None
    detail: str
    ptrace_scope: int | None


def ptrace_scope() -> int | None:
    """Yama's ``kernel.yama.ptrace_scope`` (0-3), or None without Yama."""
    try:
        with open("/proc/sys/kernel/yama/ptrace_scope", encoding="ascii") as f:
            return int(f.read().strip())
    except (OSError, ValueError):
        return None


def check_pidfd_getfd() -> PidfdCheck:
    """Try ``pidfd_getfd`` between two sibling processes, as SGLang's processes are.

    Never raises; the child processes are always reaped.
    """
    scope = ptrace_scope()
    if not sys.platform.startswith("linux"):
        return PidfdCheck(None, "pidfd_getfd exists only on Linux", scope)
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        syscall = libc.syscall
    except (OSError, AttributeError) as e:
        return PidfdCheck(None, f"cannot call syscalls from Python here: {e}", scope)

    read_fd, write_fd = os.pipe()
    held_fd, spare_fd = os.pipe()  # a descriptor the target surely has, whatever stdin is
    target = os.fork()
    if target == 0:  # the producer stand-in: hold still until killed
        os.close(read_fd)
        os.close(write_fd)
        signal.pause()
        os._exit(0)
    os.close(held_fd)
    os.close(spare_fd)
    prober = os.fork()
    if prober == 0:  # the consumer stand-in: a sibling of the target, not its parent
        os.close(read_fd)
        code = 0
        pidfd = syscall(_SYS_PIDFD_OPEN, ctypes.c_int(target), ctypes.c_uint(0))
        if pidfd < 0:
            code = ctypes.get_errno()
        else:
            fd = syscall(_SYS_PIDFD_GETFD, ctypes.c_int(pidfd), ctypes.c_int(held_fd), ctypes.c_uint(0))
            code = ctypes.get_errno() if fd < 0 else 0
        os.write(write_fd, str(code).encode())
        os._exit(0)
    os.close(write_fd)
    try:
        import select

        ready, _, _ = select.select([read_fd], [], [], _TIMEOUT_S)
        answer = os.read(read_fd, 32).decode() if ready else ""
    finally:
        os.close(read_fd)
        for pid in (prober, target):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
    return _verdict(answer, scope)


def _verdict(answer: str, scope: int | None) -> PidfdCheck:
    if not answer:
        return PidfdCheck(None, "the pidfd_getfd probe did not answer in time", scope)
    code = int(answer)
    if code == 0:
        return PidfdCheck(True, "pidfd_getfd between sibling processes is allowed", scope)
    name = errno.errorcode.get(code, str(code))
    if code == errno.ENOSYS:
        return PidfdCheck(False, f"the kernel has no pidfd_getfd ({name}; it needs Linux 5.6 or newer)", scope)
    if code in (errno.EPERM, errno.EACCES):
        why = f"Yama ptrace_scope is {scope}" if scope else "no ptrace rights (seccomp or a missing CAP_SYS_PTRACE)"
        return PidfdCheck(False, f"pidfd_getfd between sibling processes is refused ({name}): {why}", scope)
    return PidfdCheck(None, f"pidfd_getfd failed with {name}", scope)
