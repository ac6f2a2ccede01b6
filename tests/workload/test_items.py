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
    assert video.frames == 315  # ceil(10.5 * 29.97) = ceil(314.685): frames 0..314 start before 10.5 s
    assert video.label == "video 1280x720 10.5s@29.97fps"


def test_video_rates_as_ratios_and_counts_of_frames() -> None:
    ntsc = parse_video("1920x1080:6:30000/1001")
    assert (ntsc.fps, ntsc.frames, ntsc.label) == (Fraction(30000, 1001), 180, "video 1920x1080 6s@30000/1001fps")
    counted = parse_video("1920x1080:180@30000/1001")
    assert (counted.frames, counted.seconds, counted.count) == (180, Fraction(6006, 1000), 180)
    assert counted.label == "video 1920x1080 180 frames@30000/1001fps"
    assert parse_video("1920x1080:180@29.97").label == "video 1920x1080 180 frames@29.97fps"
    assert parse_video("64x48:0.01:30").frames == 1  # the first frame starts at 0, within 0.01 s
    assert parse_video("1920x1080:6:29.97").frames == 180  # ceil(179.82): what FFmpeg's -t 6 writes


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
        (parse_video, "1920x1080:0@30", "the frame count must be a whole number from 1"),
        (parse_video, "1920x1080:-5@30", "the frame count must be a whole number from 1"),
        (parse_video, "1920x1080:5@30@30", "expected WIDTHxHEIGHT:SECONDS:FPS or WIDTHxHEIGHT:FRAMES@FPS"),
        (parse_video, "1920x1080:6:0/1001", "'1920x1080:6:0/1001': the frame rate must be a positive ratio"),
        (parse_video, "1920x1080:6:30000/0", "the frame rate must be a positive ratio"),
        (parse_video, "1920x1080:6:3000000/1", "the frame rate above 1000 is out of range"),
        (parse_video, "1920x1080:6:1/2/3", "the frame rate must be a number"),
        (parse_video, "1920x1080:999999999@1", "999999999 frames at 1 fps last over 86400 s"),
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
