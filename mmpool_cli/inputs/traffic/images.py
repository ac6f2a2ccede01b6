"""An image's width, height and EXIF orientation from its header alone: PNG, JPEG, GIF, WebP.

No pixel is decoded. ``probe`` reads a byte prefix and says when it needs more; ``probe_base64``
decodes only as much of a base64 string as the header needs (64 characters for a PNG, about 1 KB
for a JPEG without a large EXIF block), doubling the prefix until the header is complete. The
decision of which size a server's processor sees (stored or EXIF-rotated) is the caller's: this
module reports the facts (format, stored size, orientation, whether the bytes end a JPEG).
Pure core: standard library only.
"""

from __future__ import annotations

import binascii
import struct
from dataclasses import dataclass

FIRST_BASE64_CHARS = 64
MAX_HEADER_BYTES = 1 << 24  # a header (with its EXIF) this long is a malformed image, not a large one


class ImageError(ValueError):
    """Bytes that are not an image mmpool can read the header of; the message says why."""


class NeedMore(Exception):
    """The prefix ends before the header does."""


@dataclass(frozen=True)
class Header:
    """What an image's header says: its format, stored size and EXIF orientation (1 when none)."""

    format: str  # "png", "jpeg", "gif", "webp"
    width: int
    height: int
    orientation: int = 1
    # the EXIF block lies beyond the bytes available: the orientation is not known
    orientation_unknown: bool = False

    @property
    def swaps(self) -> bool:
        """EXIF orientations 5 to 8 turn the image a quarter: width and height trade places."""
        return 5 <= self.orientation <= 8


def probe(data: bytes, complete: bool) -> Header:
    """The header of the image whose first bytes are ``data`` (all of them when ``complete``).

    Raises:
        NeedMore: ``data`` is a prefix that ends inside the header (never when ``complete``).
        ImageError: not PNG, JPEG, GIF or WebP, or a malformed or truncated header.
    """
    try:
        if data.startswith(b"\x89PNG\r\n\x1a\n"):
            return _png(data)
        if data.startswith(b"\xff\xd8"):
            return _jpeg(data)
        if data[:6] in (b"GIF87a", b"GIF89a"):
            return _gif(data)
        if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
            return _webp(data, complete)
    except NeedMore:
        if complete:
            raise ImageError(f"truncated: the header ends after {len(data)} bytes") from None
        raise
    if len(data) < 12 and not complete:
        raise NeedMore
    raise ImageError("not a PNG, JPEG, GIF or WebP image (its first bytes match none of them)")


def _need(data: bytes, end: int) -> None:
    if len(data) < end:
        raise NeedMore


def _png(data: bytes) -> Header:
    _need(data, 33)
    if data[12:16] != b"IHDR":
        raise ImageError("malformed PNG: its first chunk is not IHDR")
    width, height = struct.unpack(">II", data[16:24])
    _positive(width, height, "PNG")
    # Pillow reads an eXIf chunk before the image data (and writes it there); walk the chunks to IDAT
    pos = 33
    orientation = 1
    while True:
        _need(data, pos + 8)
        length, kind = struct.unpack(">I4s", data[pos : pos + 8])
        if kind in (b"IDAT", b"IEND"):
            return Header("png", width, height, orientation)
        if pos + 12 + length > MAX_HEADER_BYTES:
            raise ImageError("malformed PNG: a chunk before the image data is implausibly long")
        if kind == b"eXIf":
            _need(data, pos + 8 + length)
            orientation = _exif_orientation(data[pos + 8 : pos + 8 + length])
        pos += 12 + length


_SOF = {0xC0, 0xC1, 0xC2, 0xC3, 0xC5, 0xC6, 0xC7, 0xC9, 0xCA, 0xCB, 0xCD, 0xCE, 0xCF}


def _jpeg(data: bytes) -> Header:
    pos = 2
    orientation = 1
    exif_seen = False
    while True:
        _need(data, pos + 4)
        if data[pos] != 0xFF:
            raise ImageError(f"malformed JPEG: no marker at byte {pos}")
        marker = data[pos + 1]
        if marker == 0xFF:  # fill bytes before a marker
            pos += 1
            continue
        if marker in (0x01, *range(0xD0, 0xD8)):  # markers without a length
            pos += 2
            continue
        if marker == 0xD9 or marker == 0xDA:
            raise ImageError("malformed JPEG: the image data starts before any frame header (SOF)")
        (length,) = struct.unpack(">H", data[pos + 2 : pos + 4])
        if length < 2:
            raise ImageError(f"malformed JPEG: a segment length of {length} at byte {pos}")
        end = pos + 2 + length
        if end > MAX_HEADER_BYTES:
            raise ImageError("malformed JPEG: the header is implausibly long")
        if marker in _SOF:
            _need(data, pos + 9)
            height, width = struct.unpack(">HH", data[pos + 5 : pos + 9])
            _positive(width, height, "JPEG")
            return Header("jpeg", width, height, orientation)
        if marker == 0xE1 and not exif_seen:
            _need(data, end)
            body = data[pos + 4 : end]
            if body.startswith(b"Exif\x00\x00"):
                exif_seen = True  # Pillow keeps the first Exif block
                orientation = _exif_orientation(body[6:])
        pos = end


def _gif(data: bytes) -> Header:
    _need(data, 10)
    width, height = struct.unpack("<HH", data[6:10])
    _positive(width, height, "GIF")
    return Header("gif", width, height)


def _webp(data: bytes, complete: bool) -> Header:
    _need(data, 30)
    kind = data[12:16]
    if kind == b"VP8 ":
        if data[23:26] != b"\x9d\x01\x2a":
            raise ImageError("malformed WebP: no VP8 start code")
        w, h = struct.unpack("<HH", data[26:30])
        width, height = w & 0x3FFF, h & 0x3FFF
        _positive(width, height, "WebP")
        return Header("webp", width, height)
    if kind == b"VP8L":
        if data[20] != 0x2F:
            raise ImageError("malformed WebP: no VP8L signature")
        bits = int.from_bytes(data[21:25], "little")
        return Header("webp", (bits & 0x3FFF) + 1, ((bits >> 14) & 0x3FFF) + 1)
    if kind == b"VP8X":
        flags = data[20]
        width = int.from_bytes(data[24:27], "little") + 1
        height = int.from_bytes(data[27:30], "little") + 1
        if not flags & 0x08:
            return Header("webp", width, height)
        # the EXIF chunk usually follows the image data: walk the chunks to it
        pos = 30
        while True:
            if len(data) < pos + 8:
                if complete and len(data) == pos:
                    return Header("webp", width, height)  # the flag set, but no EXIF chunk
                raise NeedMore
            length = int.from_bytes(data[pos + 4 : pos + 8], "little")
            if pos + 8 + length > MAX_HEADER_BYTES * 64:
                raise ImageError("malformed WebP: a chunk is implausibly long")
            if data[pos : pos + 4] == b"EXIF":
                if len(data) < pos + 8 + length:
                    if complete:
                        raise ImageError("truncated WebP: its EXIF chunk is cut short")
                    raise NeedMore
                exif = data[pos + 8 : pos + 8 + length]
                if exif.startswith(b"Exif\x00\x00"):
                    exif = exif[6:]
                return Header("webp", width, height, _exif_orientation(exif))
            pos += 8 + length + (length & 1)
    raise ImageError(f"malformed WebP: unknown first chunk {kind!r}")


def _positive(width: int, height: int, fmt: str) -> None:
    if width == 0 or height == 0:
        raise ImageError(f"malformed {fmt}: a side of 0 pixels ({width}x{height})")


def _exif_orientation(tiff: bytes) -> int:
    """The Orientation tag (0x0112) of IFD0 of a TIFF-structured EXIF block; 1 when it has none."""
    if tiff[:4] == b"II*\x00":
        order = "<"
    elif tiff[:4] == b"MM\x00*":
        order = ">"
    else:
        return 1  # Pillow reads no orientation from a block it cannot parse either
    try:
        (ifd,) = struct.unpack(order + "I", tiff[4:8])
        (count,) = struct.unpack(order + "H", tiff[ifd : ifd + 2])
        for i in range(count):
            entry = tiff[ifd + 2 + 12 * i : ifd + 14 + 12 * i]
            tag, kind, _, value = struct.unpack(order + "HHI4s", entry)
            if tag == 0x0112 and kind == 3:
                (orientation,) = struct.unpack(order + "H", value[:2])
                return int(orientation)
    except struct.error:
        return 1
    return 1


def truncation(fmt: str, tail: bytes, size: int | None) -> str | None:
    """Why an image whose last bytes are ``tail`` (of ``size`` bytes, if known) is cut short, or None.

    A decoder refuses such a file (Pillow: "image file is truncated"), so SGLang fails the request.
    JPEGs are not judged: libjpeg finishes one without its end marker (nvJPEG then does not take it).
    """
    if fmt == "png" and not tail.endswith(b"IEND\xaeB`\x82"):
        return "truncated PNG: it does not end with its IEND chunk"
    if fmt == "gif" and not tail.endswith(b";"):
        return "truncated GIF: it does not end with its trailer"
    return None


def riff_truncation(head: bytes, size: int) -> str | None:
    """Why a WebP of ``size`` bytes is shorter than its RIFF header says, or None."""
    declared = int.from_bytes(head[4:8], "little") + 8
    if size < declared:
        return f"truncated WebP: {size} bytes of the {declared} its header declares"
    return None


def base64_size(text: str) -> int:
    """The number of bytes base64 ``text`` decodes to."""
    return len(text) // 4 * 3 - (len(text) - len(text.rstrip("="))) if len(text) % 4 == 0 else len(text) * 3 // 4


def b64decode_tail(text: str) -> bytes:
    """The last bytes of base64 ``text`` (from its last 16 characters; b"" when they do not decode)."""
    try:
        return binascii.a2b_base64(text[-16:] if len(text) >= 16 else text, strict_mode=True)
    except ValueError:
        return b""


def b64decode_prefix(text: str, chars: int, whole: bool = True) -> bytes:
    """The bytes of the first ``chars`` characters of base64 ``text`` (cut to a multiple of 4).

    ``whole`` False: ``text`` is itself a prefix, cut to a multiple of 4 even when all of it is asked for.

    Raises:
        ImageError: characters outside the base64 alphabet (SGLang decodes with ``validate=True``).
    """
    if chars < len(text) or not whole:
        chars = min(chars, len(text))
        part = text[: chars - chars % 4]
    else:
        part = text
    try:
        return binascii.a2b_base64(part, strict_mode=True)
    except ValueError as e:  # binascii.Error, or a non-ASCII character
        raise ImageError(f"not valid base64 ({e})") from None


def probe_base64(text: str, whole: bool = True) -> Header:
    """The header of the base64-encoded image ``text``, decoding only the prefix it needs.

    ``whole`` is False when ``text`` is itself only the start of the string (a log that cuts it):
    a header that runs past its end is then an ``ImageError`` saying so.

    Raises:
        ImageError: not base64, not an image, a malformed header, or a header past the text.
    """
    chars = FIRST_BASE64_CHARS
    while True:
        complete = chars >= len(text)
        data = b64decode_prefix(text, chars, whole)
        try:
            return probe(data, complete and whole)
        except NeedMore:
            if complete:
                raise ImageError(
                    f"its header runs past the {len(text)} characters the log kept; "
                    "log whole strings (--log-requests-level 3)"
                ) from None
        chars *= 4


def base64_ends_jpeg(text: str) -> bool:
    """Whether the bytes of base64 ``text`` end with a JPEG's end marker FFD9, from its last 16 characters.

    ``text`` may be only the end of the string (a log's tail): a valid base64 string is a whole
    number of 4-character groups, so its last 16 characters are too, wherever the tail starts.
    """
    return b64decode_tail(text).endswith(b"\xff\xd9")
