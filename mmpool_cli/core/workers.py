"""Forked worker processes: how many a process may run, and how each one starts.

Shared by the pools' executors and the caches' per-point replays. Standard library only.
"""

from __future__ import annotations

import os


def worker_start() -> None:
    """In each worker: Ctrl-C is the parent's to handle, and the worker dies with its parent."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG: Linux only
        if os.getppid() == 1:  # the parent died before prctl: nothing to work for
            os._exit(0)
    except (OSError, AttributeError):
        pass


def default_jobs() -> int:
    """Every core this process may use."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1
