"""``mmpool trace`` (and ``simulate --from``): users' traffic as the leases the engine would take.

The model family decides every item's bytes (``workload``); the engine reads its own logs and
times the leases as it holds them (``Engine.read_traffic``). No typer, rich or torch.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from mmpool_cli.engines import DEFAULT, engine
from mmpool_cli.errors import MmpoolError
from mmpool_cli.inputs.traffic.model import Conversion, FileMap, TrafficRequest
from mmpool_cli.workload.families import Family


def resolve_model(
    model: str | None, overrides: Mapping[str, Any], flags: Mapping[str, str], engine_name: str = DEFAULT
) -> tuple[Family, dict[str, Any]]:
    """The family and processor settings of ``--model`` (with the command line's overrides).

    Raises:
        MmpoolError: no model, an unknown one, or a family whose features the engine never pools.
    """
    from mmpool_cli.workload.families import with_overrides
    from mmpool_cli.workload.hf import resolve

    if model is None:
        raise MmpoolError("--model NAME|PATH is needed: the model family decides every item's bytes")
    resolved = resolve(model, processor_kwargs=engine(engine_name).processor_kwargs)
    if not engine(engine_name).pooled(resolved.family.name):
        raise MmpoolError(
            f"{resolved.name}: {engine(engine_name).title} does not pool this family's features, so its traffic "
            "never fills the pool (see 'mmpool plan --model'); nothing to trace"
        )
    settings = with_overrides(resolved.family, dict(resolved.settings), dict(overrides), dict(flags))
    return resolved.family, settings


def trace(request: TrafficRequest, engine_name: str = DEFAULT, map_files: FileMap | None = None) -> Conversion:
    """The leases of ``request``'s traffic, as the engine holds them; ``map_files`` reads the files
    (default: one after another here; the answer is the same whatever reads them).

    Raises:
        MmpoolError: a usage error, or traffic that cannot be sized (exit 2; located messages).
    """
    if not request.inputs:
        what = "bench_serving's arguments after --" if request.source == "bench-serving" else "a log FILE"
        raise MmpoolError(f"no input: give {what}")
    if request.source != "bench-serving":
        for path in request.inputs:
            if path.startswith("--"):
                raise MmpoolError(
                    f"{path}: an option where a FILE belongs (bench_serving arguments need --from-format bench-serving)"
                )
    return engine(engine_name).read_traffic(replace(request, inputs=list(request.inputs)), map_files)
