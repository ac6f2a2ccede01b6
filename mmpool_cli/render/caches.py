"""``mmpool cache``'s report: every cache of one engine over one traffic, for a terminal or as JSON.

Laid out as ``mmpool cache --engine vllm``'s report is (``render.vllm_caches``): the verdict, then a
block of figures per cache, every size with its unit, and its curve as bars. Each cache's block is
built by one function (``cache_rows``, ``curve_rows``) from its ``CacheResult`` alone, so a new cache
is one more result in the report. Returns a renderable or text, never prints.
"""

from __future__ import annotations

import json
from typing import Any

from rich.console import Group, RenderableType

from mmpool_cli.caches.replay import ONE_PASS
from mmpool_cli.caches.report import CacheReport, CacheResult
from mmpool_cli.core.units import MiB, format_size
from mmpool_cli.core.words import count
from mmpool_cli.render.human import Laid, paragraph
from mmpool_cli.render.layout import Rows, Span

SCHEMA_VERSION = 1
CURVE_ROWS = 12  # the curve's sizes beside the deployment's and the recommended one
BAR = 24
# what a recommendation's cost counts (its JSON key -> the words after the number); a key with
# "bytes" in it is a size
COSTS = {
    "gpu_bytes_per_rank": "of GPU memory per rank",
    "kv_tokens_per_rank": "KV tokens per rank",
    "host_bytes_per_tokenizer_process": "of host RAM per tokenizer process",
    "host_bytes_all_processes": "of host RAM in all",
    "host_bytes": "of host RAM",
    "encoder_tokens_per_worker": "encoder tokens per GPU worker",
    "hits": "hits",
}


def meets(c: CacheResult) -> bool:
    return c.meets_target()


def status(report: CacheReport) -> str:
    """The JSON's ``status``: ``ok`` when every cache reaches its target at the deployment's size, else ``fail``."""
    return "ok" if all(meets(c) for c in report.caches) else "fail"


def verdict(report: CacheReport) -> str:
    """The human report's verdict: OK, or BELOW TARGET."""
    return "OK" if status(report) == "ok" else "BELOW TARGET"


def to_json(report: CacheReport) -> str:
    """The versioned JSON payload (docs/formats.md)."""
    return json.dumps({"schema_version": SCHEMA_VERSION, "status": status(report), **report.to_data()}, indent=2) + "\n"


def _size(n: int, unit: str) -> str:
    return f"{n:,} tokens" if unit == "tokens" else format_size(n)


def _pct(part: int, whole: int) -> str:
    hundredths = part * 10000 // whole
    return f"{hundredths // 100}.{hundredths % 100:02d}%"


def _cost(key: str, value: int) -> str:
    words = COSTS.get(key, key.replace("_", " "))
    return f"{format_size(value)} {words}" if "bytes" in key else f"{value:,} {words}"


def cache_rows(c: CacheResult) -> list[tuple[str, str]]:
    """One cache's figures: its size in the deployment, what it does there, unbounded, and the size to set."""
    unbounded, unbounded_work = c.curve.unbounded
    rows = [("size", f"{_size(c.size_bytes, c.unit)}  [{c.size_origin}]")]
    if c.size_bytes == 0:
        rows.append(("hits", "none: the cache is off"))
    else:
        lookups = c.counted_lookups
        share = f" ({_pct(c.hits, lookups)})" if lookups else ""
        rows.append(("hits", f"{c.hits:,} of {count(lookups, 'lookup')}{share}"))
        rows.append(("saved", f"{c.work_saved:,} {c.work_unit}"))
    top = _size(c.curve.steps[-1][0], c.unit)
    rows.append(("never evicting", f"{count(unbounded, 'hit')}, {unbounded_work:,} {c.work_unit} saved, from {top}"))
    rec = c.recommendation
    if rec is None:
        rows.append(("recommended", "none: no item is looked up twice, so no size gives a hit"))
        return rows
    goal = f"{c.target}% of those" if c.meets is None else "no request waits"
    rows.append((goal, f"{_size(rec.size_bytes, c.unit)}  [{count(c.curve.at(rec.size_bytes)[0], 'hit')}]"))
    rows.append(("setting", rec.setting))
    rows.append(("costs", ", ".join(_cost(k, v) for k, v in rec.cost.items())))
    return rows


def _bar(hits: int, most: int) -> str:
    eighths = (hits * BAR * 8) // most if most else 0
    return "█" * (eighths // 8) + ("▏▎▍▌▋▊▉"[eighths % 8 - 1] if eighths % 8 else "")


def _sizes(c: CacheResult) -> list[int]:
    """The sizes the curve shows: powers of two MiB up to the unbounded cache's, and the marked ones."""
    top = c.curve.steps[-1][0]
    out = {0, top, c.size_bytes}
    if c.recommendation is not None:
        out.add(c.recommendation.size_bytes)
    if c.method != ONE_PASS or c.unit != "bytes":
        # only the replayed points are known, and every size from the last (nothing evicted)
        points = [s for s, _, _ in c.curve.steps]
        step = max(1, -(-len(points) // CURVE_ROWS))
        return sorted({s for s in out if s in points or s >= top} | set(points[::step]) | {top})
    mib = 1
    while mib * MiB < top and len(out) < CURVE_ROWS + 4:
        out.add(mib * MiB)
        mib *= 2
    return sorted(s for s in out if s >= 0)


def curve_rows(c: CacheResult) -> list[tuple[str, list[Span]]]:
    """One cache's curve: hits at a few sizes as bars, the deployment's size and the recommended one marked."""
    most = max(c.curve.unbounded[0], 1)
    rows: list[tuple[str, list[Span]]] = []
    for size in _sizes(c):
        hits = c.curve.at(size)[0]
        marks = [m for m, at in (("deployment", c.size_bytes), ("recommended", _recommended(c))) if at == size]
        tail = f"  ← {', '.join(marks)}" if marks else ""
        rows.append((_size(size, c.unit), [(_bar(hits, most), "cyan"), (f"  {count(hits, 'hit')}{tail}", None)]))
    return rows


def _recommended(c: CacheResult) -> int | None:
    return None if c.recommendation is None else c.recommendation.size_bytes


def _title(c: CacheResult) -> str:
    return c.title[:1].upper() + c.title[1:]


def cache_human(report: CacheReport) -> RenderableType:
    """The report for a terminal: the verdict, then each cache's figures and curve, then notes and findings."""
    parts: list[RenderableType] = [paragraph(f"mmpool cache: {verdict(report)}  ({report.engine}, {report.source})")]
    for c in report.caches:
        parts.append(Laid(Rows(_title(c), [(k, [(v, None)]) for k, v in cache_rows(c)], key_style=None)))
        parts.append(Laid(Rows(f"hits by size ({c.method})", curve_rows(c), key_style=None)))
    notes: list[tuple[str, list[Span]]] = [
        (f"{c.name} cache", [(note, None)]) for c in report.caches for note in c.notes
    ]
    if notes:
        parts.append(Laid(Rows("Notes", notes, key_style=None)))
    parts.extend(paragraph(f"{n.severity}: [{n.code}] {n.message}") for n in report.notes)
    return Group(*parts)


def cache_text(report: CacheReport) -> Any:
    """The human report, as ``emit`` writes it."""
    from mmpool_cli.render import Rich

    return Rich(cache_human(report))
