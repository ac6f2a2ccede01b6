"""The content key of a media item: a digest of the bytes the server decodes, so that two requests
carrying the same image (or video) bytes get the same key, whatever way they carried them.

SGLang keys its caches by digests of the item's data (``multimodal/cache/identity.py``: SHA-256 of
the bytes; the embedding cache's ``item.hash``, of the processed feature), never by the URL or path.
mmpool reads the bytes a reference names (a ``data:`` URL's or raw base64's decoded bytes, a file's
bytes) and keys them with SHA-256 (its first 128 bits, in hex). An http(s) URL is never fetched: it is
keyed by its text (``url:``…), the same URL taken as the same image; a string a log cut in the
middle has no key. Pure core: standard library only.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import os
from urllib.parse import unquote, urlparse

from mmpool_cli.inputs.safe_open import Refused, open_regular

KEY_HEX = 32  # 128 bits of SHA-256
MAX_KEY_CHARS = 64  # what a trace's "key" may hold
_CHUNK = 1 << 20


def _digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()[:KEY_HEX]


def content_key(
    ref: str, tail: str | None = None, *, extensions: tuple[str, ...] = (), any_file: bool = False
) -> str | None:
    """The key of the item ``ref`` names (read as ``load_image``/``load_video`` read it): a path when it
    ends in one of ``extensions`` (images) or names a regular file (``any_file``: videos); None where
    the data is not all there (a log that kept only its ends) or cannot be read."""
    if tail is not None:
        return None
    if ref.startswith(("http://", "https://")):
        return "url:" + _digest(ref.encode("utf-8", "surrogatepass"))
    path: str | None = None
    if ref.startswith("file://"):
        path = unquote(urlparse(ref).path)
    elif extensions and ref.lower().endswith(extensions):
        path = ref
    elif any_file and not ref.startswith("data:"):
        try:
            named = unquote(urlparse(ref).path)
            path = named if named and os.path.isfile(named) else None
        except (ValueError, OSError):
            path = None
    if path is not None:
        return _file_key(path)
    encoded = ref.partition(",")[2] if ref.startswith("data:") else ref
    try:
        return _digest(base64.b64decode(encoded, validate=False))
    except (binascii.Error, ValueError):
        return None


def _file_key(path: str) -> str | None:
    h = hashlib.sha256()
    try:
        with open_regular(path) as f:
            while chunk := f.read(_CHUNK):
                h.update(chunk)
    except (OSError, Refused):
        return None
    return h.hexdigest()[:KEY_HEX]
