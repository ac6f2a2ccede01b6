"""vLLM's caches replayed over traffic, for a terminal: each cache's figures and its curve as bars.

Returns a renderable laid out by ``render.layout`` (numbers never cut); never prints.
"""

from __future__ import annotations

from typing import Any

from rich.console import Group, RenderableType
from rich.text import Text

from mmpool_cli.core.units import format_size
from mmpool_cli.core.words import count, counted
from mmpool_cli.render.human import Laid, paragraph
from mmpool_cli.render.layout import Rows

BAR = 32
CURVE_ROWS = 12


def _bar(hits: int, lookups: int) -> str:
    eighths = (hits * BAR * 8) // lookups if lookups else 0
    return "█" * (eighths // 8) + ("▏▎▍▌▋▊▉"[eighths % 8 - 1] if eighths % 8 else "")


def _picked(curve: list[dict[str, Any]]) -> list[dict[str, Any]]:
    if len(curve) <= CURVE_ROWS:
        return curve
    step = (len(curve) - 1) / (CURVE_ROWS - 1)
    return [curve[round(i * step)] for i in range(CURVE_ROWS)]


def _curve(title: str, curve: list[dict[str, Any]], lookups: int, key: str, unit: str) -> Laid:
    rows = []
    for point in _picked(curve):
        size = point[key]
        label = format_size(size) if unit == "B" else f"{size:,} tokens"
        rows.append((label, [(_bar(point["hits"], lookups), "cyan"), (f"  {point['hits']:,} of {lookups:,}", None)]))
    return Laid(Rows(title, rows, key_style=None))


def _rows(title: str, rows: list[tuple[str, str]]) -> Laid:
    return Laid(Rows(title, [(k, [(v, None)]) for k, v in rows], key_style=None))


def caches_text(report: dict[str, Any]) -> RenderableType:
    """The human report of ``mmpool cache --engine vllm``."""
    t = report["traffic"]
    verdict = "OK" if report["status"] == "ok" else "BELOW TARGET"
    parts: list[RenderableType] = [
        Text(f"mmpool cache: {verdict}  ({report['engine']}, {report['model']})"),
        paragraph(
            f"{count(t['requests_with_images'], 'request')} with {count(t['images'], 'image')} "
            f"({t['distinct_images']:,} distinct) from {', '.join(t['files'])}"
            + "".join(f"; {counted(n, what)} not replayed" for what, n in t["not_replayed"].items())
        ),
    ]
    pc, enc = report["caches"][:2]
    pre = next((c for c in report["caches"] if c["name"] == "prefix"), None)
    rows = [
        ("layout", f"{pc['layout']}, {count(pc['api_processes'], 'API process', 'API processes')}"),
        ("size", format_size(pc["size_bytes"]) + f"  [{pc['size_origin']}]"),
        ("hits", f"{pc['hits']:,} of {count(pc['lookups'], 'lookup')} ({pc['unbounded_hits']:,} if it never evicted)"),
    ]
    if pc["recommended_bytes"] is not None:
        cost = pc["recommended_cost"]
        rows += [
            (
                f"{pc['target_hits_percent']}% of those",
                format_size(pc["recommended_bytes"]) + f"  [{count(cost['hits'], 'hit')}]",
            ),
            ("setting", pc["recommended_setting"]),
            ("host RAM then", format_size(cost["host_bytes"]) + f"  [now up to {pc['host_bytes']:,} B]"),
        ]
    if pc["failed_requests"]:
        rows.append(("requests vLLM fails", ", ".join(str(f["request"]) for f in pc["failed_requests"])))
    parts.append(_rows("Processor cache (host RAM)", rows))
    parts.append(_curve("hits by size", pc["curve"], pc["lookups"], "size_bytes", "B"))
    size = "unknown" if enc["size_tokens"] is None else f"{enc['size_tokens']:,} tokens"
    rows = [
        ("budget", size),
        ("hits", f"{enc['hits']:,} of {count(enc['lookups'], 'item')} shared from the cache"),
        *([("never encoded", f"{count(enc['served_by_prefix'], 'item')} in a cached prefix")] if pre else []),
        ("waited", f"{count(len(enc['waited_requests']), 'request')}; refused {len(enc['refused_requests']):,}"),
        ("peak", "unknown" if enc["occupancy_peak_tokens"] is None else f"{enc['occupancy_peak_tokens']:,} tokens"),
        ("smallest with no wait", f"{enc['recommended_tokens']:,} tokens"),
        ("setting", enc["recommended_setting"]),
    ]
    parts.append(_rows("Encoder cache (tokens, per GPU worker)", rows))
    parts.append(_curve("hits by budget", enc["curve"], enc["lookups"], "size_tokens", "tokens"))
    if pre is not None:
        rows = [
            ("size", f"{pre['size_tokens']:,} tokens  [{pre['size_origin']}]"),
            ("served", f"{pre['hits']:,} of {pre['lookups']:,} prompt tokens ({pre['unbounded_hits']:,} unbounded)"),
        ]
        if pre["recommended_setting"] is not None:
            rows.append(("setting", pre["recommended_setting"]))
        parts.append(_rows("Prefix cache (KV blocks)", rows))
        parts.append(_curve("prompt tokens served by KV tokens", pre["curve"], pre["lookups"], "size_tokens", "tokens"))
    notes = [("-", note) for cache in (pc, enc, *([pre] if pre else [])) for note in cache["notes"]]
    notes += [("-", f"{f['severity']}: [{f['code']}] {f['message']}") for f in report.get("findings", [])]
    parts.append(_rows("Notes", notes))
    return Group(*parts)
