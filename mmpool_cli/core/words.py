"""Counts in words: ``1 request``, ``2 requests``. Pure core: standard library only."""

from __future__ import annotations


def count(n: int, noun: str, plural: str | None = None) -> str:
    """``n`` and ``noun``, the noun in the plural unless ``n`` is 1 (``plural`` where ``s`` will not do).

    >>> count(1, "request"), count(2, "body", "bodies"), count(1200, "alloc")
    ('1 request', '2 bodies', '1,200 allocs')
    """
    return f"{n:,} {noun if n == 1 else plural or noun + 's'}"
