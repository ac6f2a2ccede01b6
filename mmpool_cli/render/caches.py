"""``mmpool cache``'s output: the caches' figures for a terminal, or JSON. Returns text, never prints."""

from __future__ import annotations

import json

from mmpool_cli.caches.replay import ONE_PASS
from mmpool_cli.caches.report import CacheReport, CacheResult
from mmpool_cli.core.units import MiB

SCHEMA = 1
CURVE_ROWS = 12  # the human table's sizes beside the deployment's and the recommended one


def verdict(report: CacheReport) -> str:
    """OK when every cache reaches its target at the deployment's size, else BELOW TARGET."""
    return "OK" if all(meets(c) for c in report.caches) else "BELOW TARGET"


def meets(c: CacheResult) -> bool:
    return c.meets_target()


def to_json(report: CacheReport) -> str:
    return json.dumps({"schema": SCHEMA, "verdict": verdict(report), **report.to_data()}, indent=2) + "\n"


def _size(n: int, unit: str) -> str:
    return f"{n:,} tokens" if unit == "tokens" else _bytes(n)


def _bytes(n: int) -> str:
    if n % MiB == 0:
        return f"{n:,} B ({n // MiB:,} MiB)"
    whole, rest = divmod(n * 100 // MiB, 100)
    return f"{n:,} B (≈{whole:,}.{rest:02d} MiB)"


def _pct(part: int, whole: int) -> str:
    if whole == 0:
        return "-"
    hundredths = part * 10000 // whole
    return f"{hundredths // 100}.{hundredths % 100:02d}%"


def _sizes(c: CacheResult) -> list[int]:
    """The sizes the human table shows: powers of two MiB up to the unbounded cache's, and the marked ones."""
    top = c.curve.steps[-1][0]
    out = {0, top, c.size_bytes}
    if c.recommendation is not None:
        out.add(c.recommendation.size_bytes)
    if (
        c.method != ONE_PASS or c.unit != "bytes"
    ):  # only the replayed points are known, and every size from the last (nothing evicted)
        points = [s for s, _, _ in c.curve.steps]
        step = max(1, -(-len(points) // CURVE_ROWS))
        return sorted({s for s in out if s in points or s >= top} | set(points[::step]) | {top})
    mib = 1
    while mib * MiB < top and len(out) < CURVE_ROWS + 4:
        out.add(mib * MiB)
        mib *= 2
    return sorted(s for s in out if s >= 0)


def cache_text(report: CacheReport) -> str:
    """The report for a terminal: a block per cache, then a few points of its curve."""
    lines = [f"mmpool cache: {verdict(report)}  ({report.engine}, {report.source})"]
    for c in report.caches:
        hits, work = c.hits, c.work_saved
        unbounded, unbounded_work = c.curve.unbounded
        lines.append(c.title)
        lines.append(f"  size            {_size(c.size_bytes, c.unit)}  [{c.size_origin}]")
        lines.append(f"  lookups         {c.counted_lookups:,}")
        lines.append(f"  hits            {hits:,} ({_pct(hits, c.counted_lookups)})")
        lines.append(f"  {c.work_unit + ' saved':<15} {work:,}")
        top = _size(c.curve.steps[-1][0], c.unit)
        lines.append(f"  unbounded       {unbounded:,} hits, {unbounded_work:,} {c.work_unit} saved, at {top}")
        rec = c.recommendation
        if rec is None:
            lines.append("  recommended     none: no item is looked up twice, so no size gives a hit")
        else:
            at = c.curve.at(rec.size_bytes)[0]
            cost = ", ".join(f"{k.replace('_', ' ')} {v:,}" for k, v in rec.cost.items())
            goal = f"target {c.target}% of {unbounded:,}" if c.meets is None else "the smallest where no request waits"
            lines.append(
                f"  recommended     {rec.setting}: {_size(rec.size_bytes, c.unit)}, {at:,} hits ({goal}); costs {cost}"
            )
        lines.append(f"  curve           size → hits ({c.method})")
        for size in _sizes(c):
            h, _ = c.curve.at(size)
            mark = []
            if size == c.size_bytes:
                mark.append("deployment")
            if rec is not None and size == rec.size_bytes:
                mark.append("recommended")
            tail = f"  ← {', '.join(mark)}" if mark else ""
            lines.append(f"    {_size(size, c.unit):<34} {h:>12,}{tail}")
        lines.extend(f"  note: {n}" for n in c.notes)
    lines.extend(f"{n.severity}: [{n.code}] {n.message}" for n in report.notes)
    return "\n".join(lines) + "\n"
