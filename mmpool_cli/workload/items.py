"""The items of one request, parsed from the command line: images, videos and audio clips.

``WxH`` for an image, ``WxH:SECONDS:FPS`` or ``WxH:FRAMES@FPS`` for a video (FPS is the source frame
rate, a decimal or a ratio such as 30000/1001; SECONDS long, the video has ⌈SECONDS × FPS⌉ frames, those
that start within it, as an encoder cutting at SECONDS writes), ``SECONDS`` for audio. Numbers are
decimals, kept exact.
Pure core: standard library only.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from fractions import Fraction

from mmpool_cli.core.excerpt import excerpt
from mmpool_cli.errors import MmpoolError

# Bounds that keep every size computation small and exact (products stay below 2**53).
MAX_SIDE = 1 << 17  # 131072 px
MAX_SECONDS = 24 * 3600
MAX_FPS = 1000

_SIZE = re.compile(r"([0-9]+)[xX×]([0-9]+)")  # ASCII digits, as every number mmpool reads
# Decimal text longer than this is refused before it is turned into an exact Fraction ("1e-99999").
_MAX_NUMBER_TEXT = 24
_SCIENTIFIC = re.compile(r"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)[eE][+-]?[0-9]+")


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
    """One video: frame size, duration in seconds and source frame rate (exact); ``count``: its frames
    where they were given (``WxH:FRAMES@FPS``), the duration then being FRAMES / FPS."""

    width: int
    height: int
    seconds: Fraction
    fps: Fraction
    count: int | None = None

    @property
    def frames(self) -> int:
        """Frames in the source: those given, else ⌈seconds × fps⌉, the frames that start within the
        duration (FFmpeg's ``-t 6`` at 30000/1001 fps writes 180, as SGLang's decoder then counts)."""
        return self.count if self.count is not None else (self.seconds * self.fps).__ceil__()

    @property
    def label(self) -> str:
        """How the item is named in plans: ``video 1920x1080 30s@30fps``, ``... 180 frames@30000/1001fps``."""
        length = f"{_dec(self.seconds)}s" if self.count is None else f"{self.count} frames"
        return f"video {self.width}x{self.height} {length}@{_rate_text(self.fps)}fps"


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


def _rate_text(x: Fraction) -> str:
    """A rate as written: a decimal where one is exact, else the ratio (30000/1001)."""
    d = x.denominator
    while d % 2 == 0:
        d //= 2
    while d % 5 == 0:
        d //= 5
    return _dec(x) if d == 1 else f"{x.numerator}/{x.denominator}"


def _size(flag: str, text: str, example: str) -> tuple[int, int]:
    m = _SIZE.fullmatch(text.strip())
    if m is None:
        raise ItemError(f"{flag} {quote_clipped(text)}: expected WIDTHxHEIGHT in pixels, e.g. {example}")
    if max(len(m.group(1)), len(m.group(2))) > len(str(MAX_SIDE)):  # int() of 5000 digits costs, and fails
        raise ItemError(f"{flag} {quote_clipped(text)}: a side above {MAX_SIDE} pixels is out of range")
    width, height = int(m.group(1)), int(m.group(2))
    if width == 0 or height == 0:
        raise ItemError(f"{flag} {quote_clipped(text)}: width and height must be at least 1 pixel, e.g. {example}")
    if width > MAX_SIDE or height > MAX_SIDE:
        raise ItemError(f"{flag} {quote_clipped(text)}: a side above {MAX_SIDE} pixels is out of range")
    return width, height


def _number(flag: str, text: str, what: str, limit: int, example: str) -> Fraction:
    if _SCIENTIFIC.fullmatch(text.strip()):
        raise ItemError(
            f"{flag} {quote_clipped(text)}: {what} {excerpt(text.strip())} is in scientific notation: "
            f"write it in plain digits (at most {limit}), e.g. {example}"
        )
    try:
        if len(text.strip()) > _MAX_NUMBER_TEXT or "e" in text.lower() or not text.strip().isascii():
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


_RATIO = re.compile(r"([0-9]{1,9})/([0-9]{1,9})")
_FRAMES = re.compile(r"[0-9]{1,9}")


def _frame_rate(text: str, whole: str, example: str) -> Fraction:
    """FPS: a decimal (29.97) or a ratio of whole numbers (30000/1001, as FFmpeg writes NTSC rates)."""
    m = _RATIO.fullmatch(text.strip())
    if m is None:
        return _number("--video", text, "the frame rate", MAX_FPS, example)
    if int(m.group(1)) == 0 or int(m.group(2)) == 0:
        raise ItemError(f"--video {quote_clipped(whole)}: the frame rate must be a positive ratio, e.g. 30000/1001")
    fps = Fraction(int(m.group(1)), int(m.group(2)))
    if fps > MAX_FPS:
        raise ItemError(f"--video {quote_clipped(whole)}: the frame rate above {MAX_FPS} is out of range")
    return fps


def parse_video(text: str) -> Video:
    """``--video WxH:SECONDS:FPS`` (``1920x1080:30:30``: 30 s of 1080p at 30 fps, ⌈SECONDS × FPS⌉
    frames) or ``--video WxH:FRAMES@FPS`` (``1920x1080:180@30000/1001``); FPS a decimal or a ratio.

    Raises:
        ItemError: a malformed part, a non-positive duration, frame count or frame rate, or under one frame.
    """
    example = "1920x1080:30:30 (30 s of 1080p at 30 fps) or 1920x1080:180@30000/1001 (180 frames at 29.97 fps)"
    parts = text.split(":")
    if len(parts) == 2 and parts[1].count("@") == 1:
        width, height = _size("--video", parts[0], example)
        count_text, rate_text = parts[1].split("@")
        if _FRAMES.fullmatch(count_text.strip()) is None or int(count_text) < 1:
            raise ItemError(
                f"--video {quote_clipped(text)}: the frame count must be a whole number from 1, e.g. {example}"
            )
        count, fps = int(count_text), _frame_rate(rate_text, text, example)
        if Fraction(count) / fps > MAX_SECONDS:
            raise ItemError(
                f"--video {quote_clipped(text)}: {count} frames at {_rate_text(fps)} fps last over {MAX_SECONDS} s"
            )
        return Video(width, height, Fraction(count) / fps, fps, count)
    if len(parts) != 3:
        raise ItemError(
            f"--video {quote_clipped(text)}: expected WIDTHxHEIGHT:SECONDS:FPS or WIDTHxHEIGHT:FRAMES@FPS, "
            f"e.g. {example}"
        )
    width, height = _size("--video", parts[0], example)
    seconds = _number("--video", parts[1], "the duration in seconds", MAX_SECONDS, example)
    fps = _frame_rate(parts[2], text, example)
    return Video(width, height, seconds, fps)


def parse_audio(text: str) -> Audio:
    """``--audio SECONDS``: e.g. ``30``.

    Raises:
        ItemError: not a positive number of seconds.
    """
    return Audio(_number("--audio", text, "the duration in seconds", MAX_SECONDS, "30"))
