"""``simulate --trace DIR`` of a recording: the recording's own layout wherever the user said nothing else."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from mmpool_cli.cli.options import TransportChoice, granularity_arg
from mmpool_cli.cli.pool_options import PoolOptions
from mmpool_cli.engines.sglang import rules as sg
from mmpool_cli.errors import MmpoolError

PARALLEL = ("tp", "dp", "attn_dp_size", "enable_dp_attention")  # the flags that make the consumers


def own_layout(
    pool: PoolOptions, path: str, told: Mapping[str, str], environ: Mapping[str, str], *, merged: bool = False
) -> tuple[PoolOptions, dict[str, str], str] | None:
    """The pool flags and environment that replay the recording at ``path`` as its pools were, and what it says.

    Each part of the layout (transport, workers, consumers as ``--tp``, budget, recycle interval)
    is the recording's unless a flag in ``told`` or a variable of ``environ`` sets it: a first
    replay then makes the recorded pools' decisions, and the sentence says which parts were whose.
    ``merged``: ``path`` is a trace file, whose first line may give the layout of the recording it was
    merged from (``trace --from DIR``); None where it gives none.
    """
    from mmpool_cli.traces.recording import layout_of, trace_layout

    granularity = granularity_arg(pool.vmm_granularity)
    own = trace_layout(path, granularity) if merged else layout_of(path, granularity)
    if own is None:
        return None
    if own.transport not in TransportChoice.__members__:
        raise MmpoolError(f"{path}: pools of transport {own.transport!r}, which simulate does not replay")
    changes: dict[str, Any] = {}
    applied: list[str] = []
    kept: list[str] = []
    env = dict(environ)

    def part(given: list[str], field: str, value: Any, flag: str) -> None:
        if given:
            kept.extend(given)
        else:
            changes[field] = value
            applied.append(flag)

    budget = [told["size"]] if "size" in told else [found[0]] if (found := sg.env_name(sg.ENV_BUDGET, environ)) else []
    unsplit = ""
    if budget or own.budget_mb is not None:
        part(budget, "size", f"{own.budget_mb}MiB", f"--size {own.budget_mb}MiB")
    else:
        unsplit = f"; no --size: {own.unsplit()}"
    part([told[n] for n in ("workers",) if n in told], "workers", own.workers, f"--workers {own.workers}")
    part([told[n] for n in PARALLEL if n in told], "tp", own.consumers, f"--tp {own.consumers}")
    transport = TransportChoice(own.transport)
    part([told[n] for n in ("transport",) if n in told], "transport", transport, f"--transport {own.transport}")
    recycle = sg.env_name(sg.ENV_RECYCLE, environ)
    if recycle is not None:
        kept.append(recycle[0])
    else:
        env[sg.ENV_RECYCLE] = repr(own.recycle_interval_s)
    said = "the recording's own layout: " + (" ".join(applied) if applied else "none of its flags")
    if recycle is None:
        said += f" with {own.recycle_setting()}"
    if kept:
        said += f" (yours: {', '.join(kept)})"
    return dataclasses.replace(pool, **changes), env, said + unsplit
