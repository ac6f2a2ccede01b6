"""The container reader's own arithmetic: display rotation as FFmpeg and torchcodec compute it, refusals.

The frame counts and rates themselves are compared with SGLang's decoder on FFmpeg-encoded files in
``tests/engines/sglang/traffic/test_video_traffic.py``.
"""

from __future__ import annotations

import io
import math
import shlex
import struct
import sys
import tomllib
from pathlib import Path

import pytest

from mmpool_cli.inputs.traffic import videos
from mmpool_cli.inputs.traffic.videos import VideoError, probe

ONE = 1 << 16  # 1.0 in 16.16
W = 1 << 30  # 1.0 in 2.30
IDENTITY = [ONE, 0, 0, 0, ONE, 0, 0, 0, W]


def _box(kind: bytes, body: bytes) -> bytes:
    return struct.pack(">I4s", 8 + len(body), kind) + body


def _mvhd(matrix: list[int]) -> bytes:
    return _box(b"mvhd", b"\0" * 4 + b"\0" * 8 + struct.pack(">II", 1000, 0) + b"\0" * 16 + struct.pack(">9i", *matrix))


def _tkhd(matrix: list[int], version: int = 0) -> bytes:
    times = b"\0" * (16 if version else 8)
    duration = b"\0" * (8 if version else 4)
    head = bytes([version]) + b"\0\0\0" + times + b"\0\0\0\1" + b"\0" * 4 + duration + b"\0" * 16
    return _box(b"tkhd", head + struct.pack(">9i", *matrix) + struct.pack(">II", 320 << 16, 240 << 16))


def _mp4(track: list[int], movie: list[int] = IDENTITY, version: int = 0) -> io.BytesIO:
    moov = _box(b"moov", _mvhd(movie) + _box(b"trak", _tkhd(track, version)))
    return io.BytesIO(_box(b"ftyp", b"isom\0\0\0\0") + moov)


def _turn(degrees: float) -> list[int]:
    """The matrix av_display_rotation_set(-degrees) writes: ``degrees`` counter-clockwise."""
    r = math.radians(degrees)
    c, s = round(math.cos(r) * ONE), round(math.sin(r) * ONE)
    return [c, -s, 0, s, c, 0, 0, 0, W]


@pytest.mark.parametrize(("degrees", "want"), [(0, 0), (90, 90), (-90, -90), (180, 180), (270, -90), (44, 0), (46, 90)])
def test_a_tkhd_matrix_gives_torchcodecs_rounded_rotation(degrees: float, want: int) -> None:
    # av_display_rotation_get's counter-clockwise angle, which torchcodec rounds to a multiple of 90
    assert videos._mov_rotation(_mp4(_turn(degrees)), 0) == want


def test_a_version_1_tkhd_and_the_movie_matrix_count_too() -> None:
    assert videos._mov_rotation(_mp4(_turn(90), version=1), 0) == 90
    # the movie turns a quarter back: the product is upright (mov_read_tkhd multiplies them)
    assert videos._mov_rotation(_mp4(_turn(90), movie=_turn(-90)), 0) == 0


def test_no_moov_or_no_such_track_is_no_rotation() -> None:
    assert videos._mov_rotation(io.BytesIO(_box(b"ftyp", b"isom")), 0) == 0
    assert videos._mov_rotation(_mp4(_turn(90)), 1) == 0


def test_rounding_is_cs_round_half_away_from_zero() -> None:
    assert videos._round_rotation(45.0) == 90
    assert videos._round_rotation(-45.0) == -90
    assert videos._round_rotation(-180.0) == 180
    assert videos._round_rotation(None) == 0
    assert videos._rotation_degrees([0] * 9) is None  # av_display_rotation_get: NaN for a degenerate matrix


def test_bytes_that_are_no_video_are_a_failing_request() -> None:
    pytest.importorskip("av", reason="PyAV (pip install '.[video]')")
    with pytest.raises(VideoError) as e:
        probe(io.BytesIO(b"\x89PNG\r\n\x1a\n" + b"\0" * 64))
    assert e.value.fails


def test_without_pyav_it_says_how_to_install_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "av", None)
    with pytest.raises(VideoError) as e:
        probe(io.BytesIO(b""))
    assert not e.value.fails
    # mmpool is on no index: the requirement itself (pyproject's video extra), and the extra from a checkout
    extra = tomllib.loads((Path(__file__).parents[3] / "pyproject.toml").read_text())["project"][
        "optional-dependencies"
    ]["video"]
    assert str(e.value).endswith(f"pip install {shlex.quote(extra[0])} (or, from an mmpool checkout, pip install '.[video]')")
    assert "mmpool[" not in str(e.value)
    assert videos.ffmpeg_version() == ""
