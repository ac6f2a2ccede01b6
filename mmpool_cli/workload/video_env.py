"""The environment variables that change a workload's figures, read as SGLang 0.5.23 reads them.

Pure core: standard library only.
"""

from __future__ import annotations

from collections.abc import Mapping
from decimal import Decimal, InvalidOperation
from fractions import Fraction

from mmpool_cli.errors import MmpoolError
from mmpool_cli.workload import exact as fp
from mmpool_cli.workload.items import quote_clipped
from mmpool_cli.workload.qwen import ENV_VIDEO_TOTAL_PIXELS, SGLANG_VIDEO_TOTAL_PIXELS


def video_total_pixels(environ: Mapping[str, str]) -> int:
    """Qwen's video pixel budget: ``int(float(os.environ.get("VIDEO_MAX_PIXELS", ...)))``.

    Raises:
        MmpoolError: a value ``float()`` rejects (SGLang then fails when it imports the processor).
    """
    raw = environ.get(ENV_VIDEO_TOTAL_PIXELS)
    if raw is None:
        return SGLANG_VIDEO_TOTAL_PIXELS
    try:
        # float() accepts exponents; bound the text so the exact value stays small
        value = Decimal(raw.strip()) if len(raw.strip()) <= 32 else None
    except InvalidOperation:
        value = None
    if value is None or not value.is_finite() or value <= 0 or value > 10**15:
        raise MmpoolError(
            f"{ENV_VIDEO_TOTAL_PIXELS}={quote_clipped(raw)}: not a positive number of pixels that SGLang can read; "
            f"unset it or use e.g. {SGLANG_VIDEO_TOTAL_PIXELS}"
        )
    return fp.floor(fp.f64(Fraction(value)))
