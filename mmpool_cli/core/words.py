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
    """``n`` before ``phrase``, whose noun (a plural noun among its first two words) is made singular when
    ``n`` is 1; a phrase without one (``unrelated to requests``) is kept as it is.

    >>> counted(1, "requests without images"), counted(3, "requests without images"), counted(1, "video items")
    ('1 request without images', '3 requests without images', '1 video item')
    >>> counted(1, "unrelated to requests")
    '1 unrelated to requests'
    """
    if n == 1:
        words = phrase.split(" ")
        for i, word in enumerate(words[:2]):
            if word in _SINGULAR:
                words[i] = _SINGULAR[word]
                phrase = " ".join(words)
                break
    return f"{n:,} {phrase}"
