"""The compiled simulator (``_fastsim``, built from ``_fastsim.c`` at install where a C compiler is
at hand), or None: then the pure-Python reader and replay run, with the same results.

``MMPOOL_PURE_PYTHON=1`` in the environment chooses the pure-Python code even where it was built.
Neutral: knows no engine; standard library only.
"""

from __future__ import annotations

import os
from types import ModuleType


def _load() -> ModuleType | None:
    if os.environ.get("MMPOOL_PURE_PYTHON", "") not in ("", "0"):
        return None
    try:
        from mmpool_cli.simulate import _fastsim
    except ImportError:
        return None
    return _fastsim


FAST: ModuleType | None = _load()
