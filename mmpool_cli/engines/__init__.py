"""The engines mmpool plans for: each a package of its own, each named once in ``REGISTRY``.

Engines are imported on first use, so a command pays only for the engine it runs.
"""

from __future__ import annotations

import functools
import importlib
from typing import Any

from mmpool_cli.engines.interface import Engine

# name -> "module:class" of its Engine; a new engine is a package beside sglang/ and one line here
REGISTRY: dict[str, str] = {
    "sglang": "mmpool_cli.engines.sglang.engine:SGLangEngine",
    "vllm": "mmpool_cli.engines.vllm.engine:VllmEngine",
}
DEFAULT = "sglang"


@functools.cache
def engine(name: str = DEFAULT) -> Engine[Any, Any]:
    """The engine registered as ``name`` (a ``KeyError`` for a name not in ``REGISTRY`` is a bug)."""
    module, _, cls = REGISTRY[name].partition(":")
    found: type[Engine[Any, Any]] = getattr(importlib.import_module(module), cls)
    return found()


def names() -> tuple[str, ...]:
    """The registered engines, in registry order."""
    return tuple(REGISTRY)
