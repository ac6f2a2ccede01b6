"""Where this mmpool runs from, so that a hint names a command that works there.

mmpool is not on a package index: ``pip install 'mmpool[probe]'`` would fail, or install whatever
takes that name. Hints use the pip of the interpreter running mmpool, with the requirements
themselves, and name the source checkout when mmpool runs from one (an editable install or
``PYTHONPATH``); an installed wheel has no checkout and no ``scripts/``.
"""

from __future__ import annotations

import re
import shlex
import sys
from pathlib import Path

# The probe extra of pyproject.toml (a test keeps them equal).
PROBE_REQUIREMENTS = ("torch>=2.1", "nvidia-ml-py>=12.535")
PACKAGE_DIR = Path(__file__).resolve().parent
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


def tables_hint() -> str:
    """What adds an SGLang release mmpool does not know yet."""
    root = checkout()
    script = None if root is None else root / "scripts" / "gen_sglang_tables.py"
    if script is not None and script.is_file():
        return f"{script} adds newer ones"
    return "a newer SGLang release needs a newer mmpool"
