"""The machine's own RAM and ``/dev/shm`` size, for ``check`` on the host that will run vLLM.

Linux only (``/proc/meminfo``, ``statvfs``); None where they cannot be read. Pure core: standard
library only.
"""

from __future__ import annotations

import os

MEMINFO = "/proc/meminfo"
DEV_SHM = "/dev/shm"
_MAX_READ = 1 << 16


def ram_bytes(path: str = MEMINFO) -> int | None:
    """``MemTotal`` in bytes (the kernel writes it in KiB)."""
    try:
        with open(path, "rb") as f:
            text = f.read(_MAX_READ).decode("ascii", "replace")
    except OSError:
        return None
    for line in text.splitlines():
        name, _, rest = line.partition(":")
        if name == "MemTotal":
            parts = rest.split()
            if len(parts) == 2 and parts[0].isdigit() and parts[1] == "kB":
                return int(parts[0]) * 1024
    return None


def shm_bytes(path: str = DEV_SHM) -> int | None:
    """The size of the ``/dev/shm`` file system."""
    try:
        st = os.statvfs(path)
    except OSError:
        return None
    return st.f_frsize * st.f_blocks
