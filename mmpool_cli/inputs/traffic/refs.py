"""One image reference of a request (a URL, a path, a data: URL, raw base64) -> the size a server decodes.

A reference is read in the order SGLang 0.5.23's ``load_image`` reads it (``utils/common.py:2143-2182``):
http(s) URLs, ``file://`` URLs, strings ending in an image extension (paths), ``data:`` URLs, and
anything else as base64. URLs are never fetched; files are read only as far as their header.
Pure core: standard library only.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from urllib.parse import unquote, urlparse

from mmpool_cli.inputs.safe_open import Refused, open_regular
from mmpool_cli.inputs.traffic.images import (
    MAX_HEADER_BYTES,
    Header,
    ImageError,
    NeedMore,
    b64decode_prefix,
    b64decode_tail,
    base64_size,
    probe,
    probe_base64,
    riff_truncation,
    truncation,
)

IMAGE_EXTENSIONS = (".png", ".jpg", ".jpeg", ".webp", ".gif")
# Pillow's Image.open raises DecompressionBombError above 2 × Image.MAX_IMAGE_PIXELS
# (``int(1024 * 1024 * 1024 // 4 // 3)``, Image.py ``_decompression_bomb_check``); SGLang's
# ``_load_image`` catches only OSError and SyntaxError around it (utils/common.py:2128-2131), so
# the request fails.
PIL_MAX_IMAGE_PIXELS = 1024 * 1024 * 1024 // 4 // 3
PIL_BOMB_PIXELS = 2 * PIL_MAX_IMAGE_PIXELS  # 178,956,970


@dataclass(frozen=True)
class Decode:
    """How the server's processor decodes images: nvJPEG on the GPU for JPEGs, EXIF applied or not."""

    gpu_jpeg: bool  # ``gpu_image_decode``: a whole JPEG (FFD8 ... FFD9) is decoded by nvJPEG
    exif_transpose: bool  # ``smart_rgb_conversion``: PIL images go through ``ImageOps.exif_transpose``


@dataclass(frozen=True)
class Sized:
    """An image measured: the size the processor sees, the decoder, and what its header said."""

    width: int
    height: int
    decoder: str  # "nvjpeg" or "pil"
    header: Header | None  # None for an assumed size


@dataclass(frozen=True)
class Unsized:
    """An image that cannot be measured. ``fails`` marks a reference SGLang itself would refuse."""

    reason: str
    fails: bool = False
    code: str | None = None  # the finding code where it is not the usual one (a FIFO: file-not-regular)


Measured = Sized | Unsized


def measure(
    ref: str,
    decode: Decode,
    *,
    tail: str | None = None,
    assume: tuple[int, int] | None = None,
    base_dir: str = ".",
) -> Measured:
    """Measure the image ``ref`` names, as the server would decode it.

    ``tail`` is the end of the string where a log kept only its start and its end (``ref`` is
    then the start); ``assume`` is the size to give http(s) URLs, which are never fetched.
    """
    if ref.startswith(("http://", "https://")):
        if assume is None:
            return Unsized(
                "an http(s) URL cannot be measured offline (mmpool never fetches one); give --assume-image WxH"
            )
        return Sized(assume[0], assume[1], "assumed", None)
    if ref.startswith("file://"):
        return _file(unquote(urlparse(ref).path), decode, base_dir)
    if ref.lower().endswith(IMAGE_EXTENSIONS) and tail is None:
        return _file(ref, decode, base_dir)
    if ref.startswith("data:"):
        head, sep, encoded = ref.partition(",")
        if not sep:
            return Unsized("a data: URL without a comma", fails=True)
        return _base64(encoded, tail, decode)
    if ref.startswith("/"):
        # get_image_bytes (common.py:2192) opens every string that starts with '/' as a file
        what = "a raw base64 JPEG ('/9j/...')" if ref.startswith("/9j/") else "a string starting with '/'"
        return Unsized(
            f"{what}: the server opens it as a file path and fails the request; "
            "send it as a data:image/jpeg;base64, URL",
            fails=True,
        )
    return _base64(ref, tail, decode)


def _base64(encoded: str, tail: str | None, decode: Decode) -> Measured:
    try:
        header = probe_base64(encoded, whole=tail is None)
    except ImageError as e:
        return Unsized(str(e))
    end = tail if tail is not None else encoded
    last = b64decode_tail(end)
    cut = truncation(header.format, last, None)
    if cut is None and header.format == "webp" and tail is None:
        cut = riff_truncation(b64decode_prefix(encoded, 16), base64_size(encoded))
    if cut is not None:
        return Unsized(f"{cut}: the server could not decode it, or the log cut it; mmpool cannot tell which")
    return _sized(header, last.endswith(b"\xff\xd9"), decode)


def _file(path: str, decode: Decode, base_dir: str) -> Measured:
    full = os.path.join(base_dir, path)
    try:
        with open_regular(full) as f:
            size = os.fstat(f.fileno()).st_size
            chunk = 4096
            while True:
                data = f.read(chunk) if chunk <= size else f.read()
                f.seek(0)
                try:
                    header = probe(data, complete=len(data) >= size)
                    break
                except NeedMore:
                    if chunk >= MAX_HEADER_BYTES:
                        return Unsized(f"{path}: the header is implausibly long")
                    chunk *= 4
            f.seek(max(size - 16, 0))
            last = f.read(16)
            ends = last.endswith(b"\xff\xd9")
            cut = truncation(header.format, last, size)
            if cut is None and header.format == "webp":
                cut = riff_truncation(data, size)
            if cut is not None:
                return Unsized(f"{path}: {cut}: the server could not decode it either")
    except ImageError as e:
        return Unsized(f"{path}: {e}")
    except Refused as e:
        if e.strerror is None:  # a directory, FIFO, device or socket: refused as validate refuses it
            return Unsized(f"{path}: {e.reason}", code=e.code)
        return Unsized(
            f"{path}: cannot read the image ({e.strerror}); paths are read relative to "
            "the current directory, as the server read them relative to its own",
            fails=False,
        )
    except OSError as e:
        return Unsized(
            f"{path}: cannot read the image ({e.strerror}); paths are read relative to "
            "the current directory, as the server read them relative to its own",
            fails=False,
        )
    return _sized(header, ends, decode)


def _sized(header: Header, ends_jpeg: bool, decode: Decode) -> Measured:
    if decode.gpu_jpeg and header.format == "jpeg" and ends_jpeg:
        # nvJPEG returns a tensor, which smart_to_rgb leaves alone: the stored orientation. It has
        # no pixel limit (torchvision's decode_jpeg allocates the header's size on the GPU), so a
        # JPEG past Pillow's limit is decoded and sized; only a failed GPU decode falls back to Pillow.
        return Sized(header.width, header.height, "nvjpeg", header)
    pixels = max(1, header.width) * max(1, header.height)
    if pixels > PIL_BOMB_PIXELS:
        return Unsized(
            f"a {header.width}x{header.height} {header.format.upper()} ({pixels:,} pixels): Pillow's Image.open "
            f"refuses images over {PIL_BOMB_PIXELS:,} pixels (DecompressionBombError), so SGLang fails the "
            "request; scale the image down before sending it",
            fails=True,
            code="traffic-image-too-large",
        )
    if decode.exif_transpose and header.swaps:
        return Sized(header.height, header.width, "pil", header)
    return Sized(header.width, header.height, "pil", header)
