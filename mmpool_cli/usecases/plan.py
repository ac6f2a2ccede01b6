"""``mmpool plan``: what the engine will do with a pool configuration, as a plan."""

from __future__ import annotations

from typing import Any

from mmpool_cli.engines import DEFAULT, engine


def plan(request: Any, engine_name: str = DEFAULT) -> Any:
    """The engine's plan for ``request`` (its own request type); bad configurations are findings in it."""
    return engine(engine_name).plan(request)
