"""Counts in words: ``1 request``, ``2 requests``. Pure core: standard library only."""

from __future__ import annotations


def count(n: int, noun: str, plural: str | None = None) -> str:
    """``n`` and ``noun``, the noun in the plural unless ``n`` is 1 (``plural`` where ``s`` will not do).

    >>> count(1, "request"), count(2, "body", "bodies"), count(1200, "alloc")
    ('1 request', '2 bodies', '1,200 allocs')
    """
    return f"{n:,} {noun if n == 1 else plural or noun + 's'}"


# the plural nouns a counted phrase may start with (a reason, a rule), and their singulars
_SINGULAR = {"requests": "request", "lines": "line", "items": "item", "images": "image", "videos": "video"}


def counted(n: int, phrase: str) -> str:
    """``n`` before ``phrase``, whose first word, a plural noun, is made singular when ``n`` is 1.

    >>> counted(1, "requests without images"), counted(3, "requests without images"), counted(1, "blank")
    ('1 request without images', '3 requests without images', '1 blank')
    """
    first, space, rest = phrase.partition(" ")
    if n == 1 and first in _SINGULAR:
        phrase = _SINGULAR[first] + space + rest
    return f"{n:,} {phrase}"
