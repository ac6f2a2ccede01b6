"""A request's video: vLLM 0.34.0's loader frames and processor tokens, checked against its own functions."""

from __future__ import annotations

from fractions import Fraction

import pytest

from mmpool_cli.engines.vllm import encoder_budget as eb
from mmpool_cli.engines.vllm import plan as P
from mmpool_cli.engines.vllm import plan_encoder, versions
from mmpool_cli.engines.vllm import video as vv
from mmpool_cli.workload import hf, qwen
from mmpool_cli.workload.items import Video


def _vision(name: str) -> eb.QwenVision:
    """The vision settings the vLLM plan uses for a family given by name."""
    vision = plan_encoder.qwen_vision(P.VllmRequest(release=versions.release("0.34.0"), model=hf.resolve(name)))
    assert vision is not None
    return vision


def _video(row: dict) -> Video:
    # scripts/record_vllm_fixtures.py gave vLLM a source of int(seconds x fps) frames: that video, by its count
    fps = Fraction(row["fps"])
    total = int(Fraction(row["seconds"]) * fps)
    return Video(row["w"], row["h"], total / fps, fps, total)


def test_every_recorded_request_gives_vllms_frames_and_tokens(recorded):
    rows = recorded["video_requests"]
    assert len(rows) >= 100 and {r["loader"] for r in rows} == {"qwen2_vl", "qwen3_vl", "opencv", "pynvvideocodec"}
    for row in rows:
        name, video = row["family"], _video(row)
        ld = vv.loader(name, row["media_io"], None)
        assert ld.name == row["loader"], row
        if "error" in row:
            with pytest.raises(qwen.ResizeError):
                vv.video_tokens(_vision(name), name, ld, video)
            continue
        assert vv.loader_frames(ld, video) == row["loader_frames"], row
        assert vv.processor_frames(name, ld, video) == row["frames"], row
        assert vv.video_tokens(_vision(name), name, ld, video)[0] == row["tokens"], row


def test_the_default_loader_is_the_video_processors_then_the_environment():
    assert vv.loader("qwen2.5-vl", {}, "pynvvideocodec").name == "qwen2_vl"
    assert vv.loader("qwen3-vl", {}, None).name == "qwen3_vl"
    assert vv.loader("qwen3-vl", {"video_backend": "opencv"}, None).name == "opencv"
    assert vv.loader("", {}, "pynvvideocodec").name == "pynvvideocodec"
    assert vv.loader("", {}, None) == vv.Loader("opencv", 32)


@pytest.mark.parametrize(
    "kwargs", [{"video_backend": "glm46v"}, {"num_frames": "8"}, {"fps": "2"}, {"max_frames": 1.5}]
)
def test_a_loader_or_key_mmpool_cannot_count_is_said_not_guessed(kwargs):
    with pytest.raises(vv.NotModelled):
        vv.loader("qwen2.5-vl", kwargs, None)


def test_a_one_frame_video_fails_qwen3s_processor():
    one = Video(640, 480, Fraction(1, 10), Fraction(10))
    ld = vv.loader("qwen3-vl", {"video_backend": "opencv"}, None)
    with pytest.raises(qwen.ResizeError, match="fewer than 2"):
        vv.video_tokens(_vision("qwen3-vl"), "qwen3-vl", ld, one)
