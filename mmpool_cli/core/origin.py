"""Where this mmpool runs from, so that a hint names a command that works there.

mmpool is not on a package index: ``pip install 'mmpool[probe]'`` would fail, or install whatever
takes that name. Hints use the pip of the interpreter running mmpool, with the requirements
themselves, and name the source checkout when mmpool runs from one (an editable install or
``PYTHONPATH``); an installed wheel has no checkout and no ``scripts/``. Pure core: standard library only.
"""

from __future__ import annotations

import re
import shlex
import sys
from pathlib import Path

# The probe extra of pyproject.toml (a test keeps them equal).
PROBE_REQUIREMENTS = ("torch>=2.1", "nvidia-ml-py>=12.535")
PACKAGE_DIR = Path(__file__).resolve().parent.parent  # mmpool_cli/
_NAME = re.compile(r'^name\s*=\s*"mmpool"\s*$', re.MULTILINE)


def checkout() -> Path | None:
    """The source checkout holding the running ``mmpool_cli``, or None (an installed wheel)."""
    root = PACKAGE_DIR.parent
    try:
        text = (root / "pyproject.toml").read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return None
    return root if _NAME.search(text) else None


def pip_install(*requirements: str) -> str:
    """``python -m pip install ...`` for the interpreter running mmpool, quoted for a POSIX shell."""
    return shlex.join([sys.executable, "-m", "pip", "install", *requirements])


def probe_install_hint() -> str:
    """How to install what ``mmpool probe`` needs, here."""
    hint = pip_install(*PROBE_REQUIREMENTS)
    root = checkout()
    if root is not None:
        hint += f" (or, from this checkout, {pip_install('-e', f'{root}[probe]')})"
    return hint


def script(relative: str) -> Path | None:
    """A script of the checkout (``scripts/...``), or None: an installed wheel has none.

    Relative to the working directory when it is inside it, else absolute.
    """
    root = checkout()
    path = None if root is None else root / relative
    if path is None or not path.is_file():
        return None
    try:  # as the user would type it from here: relative inside the checkout, absolute elsewhere
        here = Path.cwd()
    except OSError:
        return path
    return path.relative_to(here) if path.is_relative_to(here) else path
