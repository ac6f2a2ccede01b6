"""Quoting user input in messages: a short prefix of anything long, so that no input makes a long line.

Pure core: standard library only.
"""

from __future__ import annotations

SHOWN = 32


def excerpt(text: str, shown: int = SHOWN) -> str:
    """``repr(text)``, or the ``repr`` of its first ``shown`` characters and its length when longer.

    >>> excerpt("1GiB")
    "'1GiB'"
    >>> excerpt("9" * 5000, 4)
    "'9999…' (5,000 characters)"
    """
    if len(text) <= shown:
        return repr(text)
    quoted = repr(text[:shown])
    return f"{quoted[:-1]}…{quoted[-1]} ({len(text):,} characters)"


def shorten(text: str, shown: int = SHOWN) -> str:
    """``text`` itself, or its first ``shown`` characters and ``…`` when longer (for unquoted places).

    >>> shorten("9" * 5000, 4)
    '9999…'
    """
    return text if len(text) <= shown else text[:shown] + "…"


def duplicate_key(key: str, first: str | None = None) -> str:
    """The one message for a key given twice in one mapping (YAML configs, JSON trace lines).

    >>> duplicate_key("tp-size", "on line 1")
    "key 'tp-size' appears again (first on line 1); only the last one would count: keep one"
    """
    where = f" (first {first})" if first else ""
    return f"key {excerpt(key)} appears again{where}; only the last one would count: keep one"
