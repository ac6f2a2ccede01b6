"""The probe's processes die with their parent, whatever it dies of (SIGKILL included).

mmpool's fork server imports torch for seconds before it watches its "alive" pipe, and a child
forked from it may be busy on the GPU: a killed mmpool could leave them running. Each asks the
kernel for a parent-death signal (Linux ``PR_SET_PDEATHSIG``, through ctypes) as the first thing
it does: mmpool's death kills the fork server, whose death kills its children.

The fork server imports this module first (``processes.PRELOAD``), which binds it to the mmpool
process named by ``PARENT_ENV``; ``worker.serve`` binds each child to the fork server. Elsewhere
the import does nothing.
"""

from __future__ import annotations

import ctypes
import os
import signal

PARENT_ENV = "MMPOOL_PROBE_PARENT"
_PR_SET_PDEATHSIG = 1
# The fork server's pid, in the fork server and the children it forks (None elsewhere).
SERVER_PID: int | None = None


def bind(parent: int) -> bool:
    """SIGKILL this process when ``parent`` (its parent now) dies; it dies at once if that already happened.

    The kernel signals the death of the parent *thread*: ``parent`` must have started this process
    from a thread that lives as long as it does (its main thread). Returns False where the kernel
    has no parent-death signal (not Linux); the pipes to the parent remain the only tie there.
    """
    try:
        answer: int = ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        bound = answer == 0
    except (OSError, AttributeError):
        bound = False
    if os.getppid() != parent:  # it died before the request was made: nothing would ever signal us
        os.kill(os.getpid(), signal.SIGKILL)
    return bound


def _bind_fork_server() -> None:
    global SERVER_PID
    parent = os.environ.pop(PARENT_ENV, "")  # the server's children must not inherit it
    if parent.isdigit() and int(parent) != os.getpid():
        SERVER_PID = os.getpid()
        bind(int(parent))


_bind_fork_server()
