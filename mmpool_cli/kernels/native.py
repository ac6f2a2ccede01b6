"""The compiled simulator (``_fastsim``, built from ``_fastsim.c`` at install where a C compiler is
at hand), or None: then the pure-Python reader and replay run, with the same results.

``MMPOOL_PURE_PYTHON=1`` in the environment chooses the pure-Python code even where it was built.
Neutral: knows no engine; standard library only.
"""

from __future__ import annotations

import importlib
import os
from types import ModuleType


def compiled(name: str) -> ModuleType | None:
    """The compiled module ``mmpool_cli.kernels.<name>`` (``_fastsim``, ``_stackdist``), or None where it
    was not built or ``MMPOOL_PURE_PYTHON`` asks for the pure-Python code."""
    if os.environ.get("MMPOOL_PURE_PYTHON", "") not in ("", "0"):
        return None
    try:
        return importlib.import_module(f"mmpool_cli.kernels.{name}")
    except ImportError:
        return None


FAST: ModuleType | None = compiled("_fastsim")
