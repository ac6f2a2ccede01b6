"""VIDEO_MAX_PIXELS read as SGLang reads it at import: int(float(os.environ.get(...)))."""

from __future__ import annotations

from fractions import Fraction

import pytest

from mmpool_cli.errors import MmpoolError
from mmpool_cli.workload.families import family
from mmpool_cli.workload.features import video_item_bytes
from mmpool_cli.workload.video_env import video_total_pixels


@pytest.mark.parametrize(
    ("raw", "pixels"),
    [
        (None, int(128000 * 28 * 28 * 0.9)),  # qwen_vl.py:67-69
        ("9031680", 9_031_680),
        (" 9_031_680\n", 9_031_680),  # float() strips whitespace and takes underscores
        ("9.03168e6", 9_031_680),
        ("1000000.9", 1_000_000),
        ("-5.5", -5),  # int() truncates toward zero
        ("1e300", int(float("1e300"))),
    ],
)
def test_every_text_float_takes_is_taken_alike(raw: str | None, pixels: int) -> None:
    assert video_total_pixels({} if raw is None else {"VIDEO_MAX_PIXELS": raw}) == pixels


@pytest.mark.parametrize("raw", ["lots", "", "inf", "-infinity", "nan", "1e400", "0x10"])
def test_what_float_or_int_refuses_is_an_error(raw: str) -> None:
    with pytest.raises(MmpoolError, match="VIDEO_MAX_PIXELS"):
        video_total_pixels({"VIDEO_MAX_PIXELS": raw})


def test_a_budget_of_zero_or_below_meets_sglangs_per_frame_floor() -> None:
    # max(min(602,112, total / 20 × 2), int(100,352 × 1.05)) = 105,369 px whatever the total below it:
    # 1080p frames become 224×420 and the checkpoint's minimum keeps them: 10 × 16 × 30 patches of 1,176 floats
    fam = family("qwen2.5-vl")
    for raw in ("0", "-5", "1000000"):
        got = video_item_bytes(fam, dict(fam.settings), 1920, 1080, 300, Fraction(30), {"VIDEO_MAX_PIXELS": raw})
        assert got == 10 * 16 * 30 * 1176 * 4 == 22_579_200
