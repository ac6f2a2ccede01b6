"""One video reference of a request (a URL, a path, a data: URL, raw base64) -> what the decoder reports.

Read in the order of SGLang 0.5.23's ``_normalize_video_input`` (``utils/common.py:2203-2228``):
http(s) URLs (downloaded by the server; never fetched here), ``data:`` URLs (base64 after the
comma, ``validate=True``), ``file://`` URLs, a string naming an existing file, and anything else as
raw base64. Paths are opened with the one rule for every path mmpool reads (``safe_open``), so
a FIFO, device or directory is refused in bounded time. A string the log cut in the middle cannot
be demuxed and is reported. Results are cached per reference, so repeated clips are read once.
Pure core: standard library only (PyAV through ``videos``, when a video is read).
"""

from __future__ import annotations

import binascii
import hashlib
import io
import os
from dataclasses import dataclass
from typing import BinaryIO
from urllib.parse import unquote, urlparse

from mmpool_cli.inputs.safe_open import Refused, open_regular
from mmpool_cli.inputs.traffic.videos import VideoError, VideoInfo, probe
from mmpool_cli.workload.items import Video

MAX_CACHED = 4096  # distinct references remembered (keys only: 16-byte digests or paths)
_HINT = "paths are read relative to the current directory, as the server read them relative to its own"
_B64 = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/=")


@dataclass(frozen=True)
class MeasuredVideo:
    """A video measured from its container (``info``), or given its size by ``--assume-video``."""

    info: VideoInfo | None
    assumed: Video | None = None


@dataclass(frozen=True)
class UnsizedVideo:
    """A video that cannot be measured; ``fails``: SGLang itself fails the request. ``code``: its finding."""

    reason: str
    fails: bool = False
    code: str | None = None


VideoMeasure = MeasuredVideo | UnsizedVideo


class VideoReader:
    """Measures video references, each distinct one once."""

    def __init__(self, assume: Video | None = None) -> None:
        self.assume = assume
        self._cache: dict[object, VideoMeasure] = {}

    def measure(self, ref: str, tail: str | None = None) -> VideoMeasure:
        """What the decoder reports for the video ``ref`` names (``tail``: the end of a string the log cut)."""
        if ref.startswith(("http://", "https://")):
            if self.assume is None:
                return UnsizedVideo(
                    "an http(s) URL cannot be measured offline (mmpool never fetches one); "
                    "give --assume-video WxH:SECONDS:FPS"
                )
            return MeasuredVideo(None, self.assume)
        if tail is not None:
            return UnsizedVideo(
                "the log kept only the start and the end of this video's string, and a container cannot be "
                "read from them; log whole strings (--log-requests-level 3)"
            )
        key: object = hashlib.blake2b(ref.encode("utf-8", "surrogatepass"), digest_size=16).digest()
        found = self._cache.get(key)
        if found is None:
            found = self._measure(ref)
            if isinstance(found, UnsizedVideo) and not found.fails and found.code is None:
                pass  # a missing file may appear: not remembered
            else:
                if len(self._cache) >= MAX_CACHED:
                    self._cache.clear()
                self._cache[key] = found
        return found

    def _measure(self, ref: str) -> VideoMeasure:
        if ref.startswith("data:"):
            head, sep, encoded = ref.partition(",")
            if not sep:
                return UnsizedVideo("a data: URL without a comma: the server fails the request", fails=True)
            return _from_bytes(encoded, "data: URL")
        if ref.startswith("file://"):
            return _from_path(unquote(urlparse(ref).path))
        try:
            named = unquote(urlparse(ref).path)
            exists = bool(named) and os.path.lexists(named)
            regular = exists and os.path.isfile(named)  # what SGLang asks
        except (ValueError, OSError):
            exists = regular = False
        if regular:
            return _from_path(ref)  # SGLang hands the string itself to the decoder
        if exists:
            # a directory, FIFO or device: SGLang would try it as base64; mmpool refuses it as validate does
            return _from_path(named)
        if _looks_like_base64(ref):
            return _from_bytes(ref, "base64 string")
        return UnsizedVideo(
            f"{_short(ref)}: neither a file here nor base64; {_HINT} (the server fails a request naming no file)"
        )


def _short(text: str) -> str:
    return text if len(text) <= 80 else text[:77] + "..."


def _looks_like_base64(text: str) -> bool:
    return bool(text) and all(c in _B64 for c in text[:4096].encode("ascii", "replace"))


def _from_bytes(encoded: str, what: str) -> VideoMeasure:
    try:
        data = binascii.a2b_base64(encoded, strict_mode=True)  # pybase64.b64decode(validate=True)
    except (ValueError, binascii.Error) as e:
        return UnsizedVideo(f"a {what} that is not valid base64 ({e}): the server fails the request", fails=True)
    return _probe(io.BytesIO(data), what)


def _from_path(path: str) -> VideoMeasure:
    try:
        f = open_regular(path)
    except Refused as e:
        if e.strerror is None:  # a directory, FIFO, device or socket, refused as validate refuses it
            return UnsizedVideo(f"{_short(path)}: {e.reason}", code=e.code)
        return UnsizedVideo(f"{_short(path)}: cannot read the video ({e.strerror}); {_HINT}")
    with f:
        return _probe(f, _short(path))


def _probe(source: BinaryIO, what: str) -> VideoMeasure:
    try:
        return MeasuredVideo(probe(source))
    except VideoError as e:
        if e.fails:
            return UnsizedVideo(f"{what}: {e}: SGLang's decoder fails on it too", fails=True)
        return UnsizedVideo(f"{what}: {e}")
