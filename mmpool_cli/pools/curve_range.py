"""The range of the pool's curve (``mmpool simulate --curve``, ``mmpool tune``) and its points replayed.

The engine gives the pools of every budget and the budgets it accepts (``PoolSetup``), and its plan
the KV tokens each budget takes; ``pools.curve`` replays the traffic at each point.
A range outside what the engine accepts is a usage error, in the words of the budget search's
bounds: the same budgets ``--size`` and ``--smallest-budget`` accept.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from mmpool_cli.errors import MmpoolError
from mmpool_cli.pools.curve import (
    DEFAULT_POINTS,
    CurvePoint,
    PoolCurve,
    decided,
    largest_alloc_budget,
    point,
    replay_trials,
)
from mmpool_cli.pools.executors import Executor
from mmpool_cli.pools.report import PoolSetup
from mmpool_cli.pools.trials import Trial, no_miss_budget
from mmpool_cli.traces.events import Events


@dataclass(frozen=True)
class CurveRange:
    """``--curve LO:HI`` in whole MiB (None: the default end), as written for messages, and the points."""

    lo_mb: int | None = None
    hi_mb: int | None = None
    text: str = ":"
    points: int = DEFAULT_POINTS


def pool_curve(
    wanted: CurveRange,
    events: Events,
    pools: PoolSetup,
    *,
    executor: Executor,
    kv_tokens: Any = None,  # mb -> the KV tokens that budget takes, or None where unknown
    progress: Any = None,
    known: Sequence[Trial] = (),
) -> PoolCurve:
    """The curve of ``events`` through the pools of ``pools`` at the budgets ``wanted`` names; a budget
    that a trial of ``known`` (a budget search's) replayed whole is taken from it."""
    return fill_curve(
        plan_curve(wanted, events, pools),
        events,
        pools,
        executor=executor,
        kv_tokens=kv_tokens,
        progress=progress,
        known=known,
    )


def plan_curve(wanted: CurveRange, events: Events, pools: PoolSetup) -> PoolCurve:
    """The curve's range, without its points: a usage error for a range the engine or the traffic rules
    out, before anything is replayed."""
    lowest, highest = pools.lowest_mb, pools.highest_mb
    flag = "--curve" if wanted.text == ":" else f"--curve {wanted.text!r}"
    if highest < lowest:
        raise MmpoolError("the plan refuses every budget for this layout; see 'mmpool plan'")
    for end, mb in (("lower", wanted.lo_mb), ("upper", wanted.hi_mb)):
        if mb is not None and mb < lowest:
            raise MmpoolError(
                f"{flag}: the {end} bound, {mb} MiB, is below the smallest budget SGLang accepts for this "
                f"layout ({lowest} MiB; 'mmpool plan --size {mb}MiB' says why)"
            )
        if mb is not None and mb > highest:
            raise MmpoolError(
                f"{flag}: the {end} bound, {mb} MiB, is above the largest budget plan accepts for this "
                f"layout ({highest} MiB; 'mmpool plan --size {mb}MiB' says why)"
            )
    feature = largest_alloc_budget(events, pools.layouts, lowest, highest)
    no_miss = no_miss_budget(events, pools.layouts, lowest, highest)
    lo = wanted.lo_mb
    if lo is None:
        if feature > highest:
            raise MmpoolError(
                f"{flag}: the largest feature of the traffic fits no budget up to the largest plan accepts "
                f"({highest} MiB): every budget sends it over the CPU path; give the range as --curve LO:HI"
            )
        lo = feature
    hi = wanted.hi_mb if wanted.hi_mb is not None else min(no_miss, highest)
    if lo > hi and wanted.hi_mb is None:
        raise MmpoolError(
            f"{flag}: the lower bound is above {hi} MiB, the budget from which no alloc can miss (every budget "
            "above it makes the same replay); give a lower bound up to it, or both bounds"
        )
    if lo > hi:
        raise MmpoolError(
            f"{flag}: the largest feature of the traffic needs {lo} MiB, above the upper bound (below it that "
            "feature always falls back); give a lower bound too"
        )
    return PoolCurve(
        [],
        lo,
        hi,
        lo_given=wanted.lo_mb is not None,
        hi_given=wanted.hi_mb is not None,
        asked_points=wanted.points,
        feature_mb=feature,
        no_miss_mb=no_miss,
    )


def fill_curve(
    curve: PoolCurve,
    events: Events,
    pools: PoolSetup,
    *,
    executor: Executor,
    kv_tokens: Any = None,
    progress: Any = None,
    known: Sequence[Trial] = (),
) -> PoolCurve:
    """``curve`` (of ``plan_curve``) with its points: each replayed, or taken from a whole trial of ``known``."""
    mbs = curve.budgets_mb
    known = sorted(known, key=lambda t: t.mb)
    trials = replay_trials(
        events, pools.layouts, mbs, top=pools.highest_mb, executor=executor, progress=progress, known=known
    )
    points = [point(mb, t) for mb, t in zip(mbs, trials, strict=True)]
    if kv_tokens is not None:
        points = [
            CurvePoint(p.budget_mb, p.items, p.fallback_items, p.bytes, p.fallback_bytes, kv_tokens(p.budget_mb))
            for p in points
        ]
    replayed = len(mbs) - sum(decided(known, mb) is not None for mb in mbs)
    return dataclasses.replace(curve, points=points, replayed=replayed, trials=trials)
