"""Video references read in SGLang 0.5.23's order, refused where it cannot be measured, each read once."""

from __future__ import annotations

import base64
import os
import time
from pathlib import Path

import pytest

from mmpool_cli.inputs.traffic import video_refs
from mmpool_cli.inputs.traffic.video_refs import MeasuredVideo, UnsizedVideo, VideoReader
from mmpool_cli.inputs.traffic.videos import VideoInfo
from mmpool_cli.workload.items import parse_video

INFO = VideoInfo(320, 240, 60, 30.0, 0, "mov,mp4,m4a,3gp,3g2,mj2")


@pytest.fixture
def probes(monkeypatch: pytest.MonkeyPatch) -> list[bytes]:
    """Stand in for the demuxer (exercised on real files elsewhere): record what it was given."""
    seen: list[bytes] = []

    def fake(source):  # type: ignore[no-untyped-def]
        seen.append(source.read())
        return INFO

    monkeypatch.setattr(video_refs, "probe", fake)
    return seen


def test_http_urls_are_refused_unless_assumed() -> None:
    got = VideoReader().measure("https://example.com/a.mp4")
    assert isinstance(got, UnsizedVideo) and not got.fails and "--assume-video" in got.reason
    video = parse_video("1280x720:10:30")
    assert VideoReader(video).measure("http://example.com/a.mp4") == MeasuredVideo(None, video)


def test_data_urls_and_raw_base64_are_decoded_strictly(probes: list[bytes]) -> None:
    data = b"\0\0\0\x18ftypmp42" + bytes(range(40))
    encoded = base64.b64encode(data).decode()
    reader = VideoReader()
    assert reader.measure(f"data:video/mp4;base64,{encoded}") == MeasuredVideo(INFO)
    assert reader.measure(encoded) == MeasuredVideo(INFO)
    assert probes == [data, data]
    bad = reader.measure("data:video/mp4;base64,@@@@")
    assert isinstance(bad, UnsizedVideo) and bad.fails
    no_comma = reader.measure("data:video/mp4;base64")
    assert isinstance(no_comma, UnsizedVideo) and no_comma.fails


def test_a_string_the_log_cut_is_refused_with_the_level_that_keeps_it() -> None:
    got = VideoReader().measure("data:video/mp4;base64,AAAA", tail="AAAA")
    assert isinstance(got, UnsizedVideo) and "--log-requests-level 3" in got.reason


def test_paths_and_file_urls(tmp_path: Path, probes: list[bytes], monkeypatch: pytest.MonkeyPatch) -> None:
    clip = tmp_path / "a clip.mp4"
    clip.write_bytes(b"video bytes")
    reader = VideoReader()
    assert reader.measure(str(clip)) == MeasuredVideo(INFO)
    assert reader.measure("file://" + str(clip).replace(" ", "%20")) == MeasuredVideo(INFO)
    monkeypatch.chdir(tmp_path)
    assert reader.measure("a clip.mp4") == MeasuredVideo(INFO)  # relative to the current directory
    assert probes == [b"video bytes"] * 3


def test_a_missing_path_is_an_error_not_a_request_sglang_fails(tmp_path: Path) -> None:
    got = VideoReader().measure(str(tmp_path / "gone.mp4"))
    assert isinstance(got, UnsizedVideo) and not got.fails and "relative to the current directory" in got.reason


def test_a_fifo_or_a_directory_is_refused_at_once(tmp_path: Path) -> None:
    fifo = tmp_path / "clip.mp4"
    os.mkfifo(fifo)
    start = time.monotonic()
    for ref in (str(fifo), f"file://{fifo}"):
        got = VideoReader().measure(ref)
        assert isinstance(got, UnsizedVideo) and got.code == "file-not-regular", got
    assert time.monotonic() - start < 5
    folder = VideoReader().measure(str(tmp_path))
    assert isinstance(folder, UnsizedVideo) and folder.code == "file-unreadable"


def test_a_repeated_reference_is_read_once(probes: list[bytes]) -> None:
    reader = VideoReader()
    encoded = base64.b64encode(b"same clip").decode()
    for _ in range(5):
        assert reader.measure(encoded) == MeasuredVideo(INFO)
    assert len(probes) == 1
