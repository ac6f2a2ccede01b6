"""SGLang 0.5.23's GPU memories divided over one budget: the KV cache (the radix cache), the embedding cache,
the feature pool."""

from __future__ import annotations

from mmpool_cli.errors import MmpoolError
from mmpool_cli.inputs.traffic.tune_request import TuneRequest
from mmpool_cli.tune.split import Row, TuneReport


def tune(request: TuneRequest) -> TuneReport:
    """Every candidate split of the budget scored; the front and the recommendation."""
    raise MmpoolError("mmpool tune: SGLang's split is being built")


def tune_at(request: TuneRequest, values: dict[str, int] | None = None) -> Row:
    """One split's row (None: today's launch)."""
    raise MmpoolError("mmpool tune: SGLang's split is being built")
