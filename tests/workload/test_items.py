"""Parsing --image, --video and --audio: exact values, located one-line errors."""

from __future__ import annotations

from fractions import Fraction

import pytest

from mmpool_cli.errors import EXIT_USAGE
from mmpool_cli.workload.items import ItemError, parse_audio, parse_image, parse_video


def test_image() -> None:
    image = parse_image("1920x1080")
    assert (image.width, image.height, image.label) == (1920, 1080, "image 1920x1080")


def test_video_keeps_decimals_exact() -> None:
    video = parse_video("1280x720:10.5:29.97")
    assert (video.seconds, video.fps) == (Fraction("10.5"), Fraction("29.97"))
    assert video.frames == 314  # floor(10.5 * 29.97) = floor(314.685)
    assert video.label == "video 1280x720 10.5s@29.97fps"


def test_audio() -> None:
    assert parse_audio("30").label == "audio 30s"


@pytest.mark.parametrize(
    ("parse", "text", "says"),
    [
        (parse_image, "1920x", "expected WIDTHxHEIGHT"),
        (parse_image, "0x0", "at least 1 pixel"),
        (parse_image, "-5x10", "expected WIDTHxHEIGHT"),
        (parse_image, "999999x10", "out of range"),
        (parse_video, "1920x1080:30", "WIDTHxHEIGHT:SECONDS:FPS"),
        (parse_video, "1920x1080:-3:30", "positive"),
        (parse_video, "1920x1080:abc:30", "must be a number"),
        (parse_video, "1920x1080:30:nan", "positive"),
        (parse_video, "1920x1080:0.01:30", "less than one frame"),
        (parse_audio, "-1", "positive"),
        (parse_audio, "1e400", "scientific notation"),
        (parse_video, "10x10:1e-99999:30", "scientific notation"),
        (parse_video, "1920x1080:1e9:60", "the duration in seconds '1e9' is in scientific notation"),
        (parse_image, "9" * 5000 + "x10", "a side above 131072 pixels is out of range"),
        (parse_image, "99999999999999999999x1", "a side above 131072 pixels is out of range"),
        (parse_image, "٤x4", "expected WIDTHxHEIGHT"),  # ASCII digits only, as everywhere
    ],
)
def test_bad_items_are_usage_errors(parse, text: str, says: str) -> None:
    with pytest.raises(ItemError, match=says) as e:
        parse(text)
    assert e.value.exit_code == EXIT_USAGE
    assert "\n" not in str(e.value)


def test_long_input_is_cut_in_the_message() -> None:
    with pytest.raises(ItemError) as e:
        parse_image("x" * 10_000)
    assert len(str(e.value)) < 200
