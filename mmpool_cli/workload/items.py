"""The items of one request, parsed from the command line: images, videos and audio clips.

``WxH`` for an image, ``WxH:SECONDS:FPS`` for a video (FPS is the source frame rate; the video
has ⌊SECONDS × FPS⌋ frames), ``SECONDS`` for audio. Numbers are decimals, kept exact.
Pure core: standard library only.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from fractions import Fraction

from mmpool_cli.errors import MmpoolError

# Bounds that keep every size computation small and exact (products stay below 2**53).
MAX_SIDE = 1 << 17  # 131072 px
MAX_SECONDS = 24 * 3600
MAX_FPS = 1000

_SIZE = re.compile(r"(\d{1,9})[xX×](\d{1,9})")
# Decimal text longer than this is refused before it is turned into an exact Fraction ("1e-99999").
_MAX_NUMBER_TEXT = 24


def quote_clipped(text: str, limit: int = 60) -> str:
    """``text`` quoted for an error message, cut to ``limit`` characters so a long input stays one line."""
    return repr(text if len(text) <= limit else text[:limit] + "...")


class ItemError(MmpoolError):
    """An item given on the command line that cannot be read."""


@dataclass(frozen=True)
class Image:
    """One image of ``width`` × ``height`` pixels."""

    width: int
    height: int

    @property
    def label(self) -> str:
        """How the item is named in plans: ``image 1920x1080``."""
        return f"image {self.width}x{self.height}"


@dataclass(frozen=True)
class Video:
    """One video: frame size, duration in seconds and source frame rate (exact decimals)."""

    width: int
    height: int
    seconds: Fraction
    fps: Fraction

    @property
    def frames(self) -> int:
        """Frames in the source: ⌊seconds × fps⌋."""
        return (self.seconds * self.fps).__floor__()

    @property
    def label(self) -> str:
        """How the item is named in plans: ``video 1920x1080 30s@30fps``."""
        return f"video {self.width}x{self.height} {_dec(self.seconds)}s@{_dec(self.fps)}fps"


@dataclass(frozen=True)
class Audio:
    """One audio clip of ``seconds``."""

    seconds: Fraction

    @property
    def label(self) -> str:
        """How the item is named in plans: ``audio 30s``."""
        return f"audio {_dec(self.seconds)}s"


Item = Image | Video | Audio


def _dec(x: Fraction) -> str:
    if x.denominator == 1:
        return str(x.numerator)
    return format(Decimal(x.numerator) / Decimal(x.denominator), "f").rstrip("0")


def _size(flag: str, text: str, example: str) -> tuple[int, int]:
    m = _SIZE.fullmatch(text.strip())
    if m is None:
        raise ItemError(f"{flag} {quote_clipped(text)}: expected WIDTHxHEIGHT in pixels, e.g. {example}")
    width, height = int(m.group(1)), int(m.group(2))
    if width == 0 or height == 0:
        raise ItemError(f"{flag} {quote_clipped(text)}: width and height must be at least 1 pixel, e.g. {example}")
    if width > MAX_SIDE or height > MAX_SIDE:
        raise ItemError(f"{flag} {quote_clipped(text)}: a side above {MAX_SIDE} pixels is out of range")
    return width, height


def _number(flag: str, text: str, what: str, limit: int, example: str) -> Fraction:
    try:
        if len(text.strip()) > _MAX_NUMBER_TEXT or "e" in text.lower():
            raise InvalidOperation
        value = Decimal(text.strip())
    except InvalidOperation:
        raise ItemError(f"{flag} {quote_clipped(text)}: {what} must be a number, e.g. {example}") from None
    if not value.is_finite() or value <= 0:
        raise ItemError(f"{flag} {quote_clipped(text)}: {what} must be a positive number, e.g. {example}")
    if value > limit:
        raise ItemError(f"{flag} {quote_clipped(text)}: {what} above {limit} is out of range")
    return Fraction(value)


def parse_image(text: str) -> Image:
    """``--image WxH``: e.g. ``1920x1080``.

    Raises:
        ItemError: not WxH, a zero side, or a side above ``MAX_SIDE``.
    """
    width, height = _size("--image", text, "1920x1080")
    return Image(width, height)


def parse_video(text: str) -> Video:
    """``--video WxH:SECONDS:FPS``: e.g. ``1920x1080:30:30`` for 30 s of 1080p at 30 fps.

    Raises:
        ItemError: a malformed part, a non-positive duration or frame rate, or under one frame.
    """
    example = "1920x1080:30:30 (30 s of 1080p at 30 fps)"
    parts = text.split(":")
    if len(parts) != 3:
        raise ItemError(f"--video {quote_clipped(text)}: expected WIDTHxHEIGHT:SECONDS:FPS, e.g. {example}")
    width, height = _size("--video", parts[0], example)
    seconds = _number("--video", parts[1], "the duration in seconds", MAX_SECONDS, example)
    fps = _number("--video", parts[2], "the frame rate", MAX_FPS, example)
    video = Video(width, height, seconds, fps)
    if video.frames < 1:
        raise ItemError(f"--video {quote_clipped(text)}: {_dec(seconds)} s at {_dec(fps)} fps is less than one frame")
    return video


def parse_audio(text: str) -> Audio:
    """``--audio SECONDS``: e.g. ``30``.

    Raises:
        ItemError: not a positive number of seconds.
    """
    return Audio(_number("--audio", text, "the duration in seconds", MAX_SECONDS, "30"))
