"""The environment variables that change a workload's figures, read as SGLang 0.5.23 reads them.

Pure core: standard library only.
"""

from __future__ import annotations

from collections.abc import Mapping

from mmpool_cli.errors import MmpoolError
from mmpool_cli.workload.items import quote_clipped
from mmpool_cli.workload.qwen import ENV_VIDEO_TOTAL_PIXELS, SGLANG_VIDEO_TOTAL_PIXELS


def video_total_pixels(environ: Mapping[str, str]) -> int:
    """Qwen's video pixel budget: ``int(float(os.environ.get("VIDEO_MAX_PIXELS", ...)))``.

    Python's own ``float()`` is SGLang's parse (``qwen_vl.py:67-69``), so every text it takes is
    taken alike: whitespace, exponents, underscores, zero and negative values, which SGLang's
    per-frame floor of 105,369 px then overrides (``qwen_vl.py:274-279``).

    Raises:
        MmpoolError: a value ``float()`` rejects, or an infinite or NaN one ``int()`` rejects (SGLang
            then fails when it imports the processor).
    """
    raw = environ.get(ENV_VIDEO_TOTAL_PIXELS)
    if raw is None:
        return SGLANG_VIDEO_TOTAL_PIXELS
    try:
        return int(float(raw))
    except (ValueError, OverflowError):
        raise MmpoolError(
            f"{ENV_VIDEO_TOTAL_PIXELS}={quote_clipped(raw)}: not a number SGLang can read "
            "(int(float(...)) fails when it imports its Qwen processor); "
            f"unset it or use e.g. {SGLANG_VIDEO_TOTAL_PIXELS}"
        ) from None
