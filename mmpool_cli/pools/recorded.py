"""A replay of a recording's pools held against what they did: decision for decision, offset for offset."""

from __future__ import annotations

import os
from collections.abc import Callable

from mmpool_cli._record.mmpool_record import recfmt
from mmpool_cli.core.findings import Finding, Severity
from mmpool_cli.pools.replay import SimResult
from mmpool_cli.traces.recorded_layout import DEFAULT_GRANULARITY, of_pools
from mmpool_cli.traces.recording import Recording


def damage_findings(rec: Recording) -> list[Finding]:
    """One ``record-damaged`` warning per file of the recording that is not whole, naming it and what is read."""
    return [Finding(Severity.warning, "record-damaged", str(damage)) for damage in rec.damage]


def compare(
    rec: Recording,
    result: SimResult | None,
    granularity: int = DEFAULT_GRANULARITY,
    *,
    header_for: Callable[[int], int] | None = None,
) -> list[Finding]:
    """Whether the replay made the recorded pools' decisions: one finding, or none where it kept no decisions.

    ``header_for`` gives the data_start of the engine's cuda_ipc pools for a number of consumers: where
    the recorded pools' is another, no flags replay them, and the finding says so instead of advising flags.
    """
    if result is None or result.offsets is None:
        return []
    first = rec.pools[0]
    incomplete = [
        f"pool {p.info.get('pid')}-{p.info.get('pool')}: {why}"
        for p in rec.traces
        for why in (
            "events were dropped" if p.info.get(recfmt.K_DROPPED) else "",
            "the first parts of its trace are gone (--max-bytes)" if not p.whole else "",
            "its process did not end cleanly" if not (p.complete and p.info.get(recfmt.K_COMPLETE)) else "",
            f"{os.path.basename(p.damage[0].path)} is damaged" if p.damage else "",
        )
        if why
    ]
    if incomplete:
        return [Finding(Severity.warning, "record-not-compared", f"not compared with the recording: {incomplete[0]}")]
    layout = result.layout
    want = {
        "transport": first["transport"],
        "workers": len(rec.pools),
        "memory_size": first["layout"]["memory_size"],
        "data_start": first["layout"].get("data_start", 0),
        "recycle_ns": recfmt.interval_ns(first[recfmt.K_INTERVAL]),
    }
    have = {
        "transport": layout.transport,
        "workers": layout.workers,
        "memory_size": layout.memory_size,
        "data_start": layout.data_start,
        "recycle_ns": layout.recycle_ns,
    }
    if want != have:
        own = of_pools(rec.pools, granularity)  # the whole-MiB budget that splits into these pools
        differ = next(k for k in want if want[k] != have[k])
        made = header_for(own.consumers) if header_for is not None and own.transport == "cuda_ipc" else None
        if own.budget_mb is None:
            how = f"mmpool cannot replay the recording's own pools: {own.unsplit()}"
        elif made is not None and made != want["data_start"]:
            how = f"mmpool cannot replay the recording's own pools: {own.unplaced(int(want['data_start']), made)}"
        else:
            how = f"to compare with what the pools did, replay with {own.flags()}"
        return [
            Finding(
                Severity.info,
                "record-not-compared",
                f"the replay's {differ} ({have[differ]}) is not the recording's ({want[differ]}): {how}",
            )
        ]
    replayed = result.offsets
    differ_at = [i for i, (a, b) in enumerate(zip(rec.offsets, replayed, strict=False)) if a != b]
    if len(replayed) != len(rec.offsets) or differ_at:
        i = differ_at[0] if differ_at else min(len(replayed), len(rec.offsets))
        real = rec.offsets[i] if i < len(rec.offsets) else "none"
        sim = replayed[i] if i < len(replayed) else "none"
        return [
            Finding(
                Severity.error,
                "record-replay-differs",
                f"{len(differ_at)} of {len(rec.offsets)} allocations differ from what the recorded pools did; "
                f"the first, {rec.ids[i] if i < len(rec.ids) else i}: offset {_shown(real)} recorded, "
                f"{_shown(sim)} replayed",
            )
        ]
    misses = rec.offsets.count(None)
    return [
        Finding(
            Severity.info,
            "record-replay-matches",
            f"the replay made every decision the recorded pools made: {len(rec.offsets)} allocations, "
            f"{misses} misses, offset for offset",
        )
    ]


def _shown(offset: object) -> str:
    return "a miss" if offset is None else str(offset)
