"""The human rendering of ``mmpool simulate``: what fell back, how full the pools ran, the budget to set."""

from __future__ import annotations

import shlex

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from mmpool_cli.core.units import format_binary
from mmpool_cli.render.human import _kv_table
from mmpool_cli.render.text import version_note
from mmpool_cli.simulate.sim_report import SimulationReport, result_data


def _pct(part: int, whole: int) -> str:
    return f"{100 * part / whole:.2f}%" if whole else "n/a"


def _size(n: int | None) -> str:
    return "n/a" if n is None else format_binary(n)


def _share(part: int, whole: int, size: bool = True) -> str:
    fmt = _size if size else str
    return f"{fmt(part)} of {fmt(whole)} ({_pct(part, whole)})"


def _interval(report: SimulationReport) -> str:
    if report.result is None:
        return report.recycle_source
    seconds = f"{report.result.layout.recycle_ns / 1e9:g} s"
    return (
        f"{seconds} (SGLang's default)"
        if report.recycle_source == "default"
        else f"{seconds} ({report.recycle_source})"
    )


def simulate_human(report: SimulationReport) -> RenderableType:
    """The simulation for people: the pools, fallback, occupancy, fragmentation, and the budget search."""
    parts: list[RenderableType] = []
    verdict = Text("OK", style="bold green") if report.meets_target else Text("FALLBACK", style="bold red")
    source = report.source.get("trace") or "synthetic workload"
    parts.append(
        Text.assemble(
            "mmpool simulate: ",
            verdict,
            f"  ({version_note(report.sglang_version, report.sglang_version_chosen)}, {report.transport}, {source})",
        )
    )
    rows = [
        (
            "budget",
            f"SGLANG_MM_FEATURE_CACHE_MB={report.sglang_mm_feature_cache_mb} ({_size(report.budget_bytes)})",
        ),
        ("consumers", f"{report.consumers} (TP {report.tp_size})"),
        ("recycle interval", _interval(report)),
    ]
    if report.result is None:
        rows.append(("refused", report.refused or ""))
        parts.append(_kv_table("Pools", rows))
    else:
        d = result_data(report.result)
        rows[1:1] = [
            (
                "workers",
                f"{d['workers']} × {_size(d['per_worker_bytes'])}, {_size(d['usable_bytes_per_worker'])} usable each",
            ),
        ]
        parts.append(_kv_table("Pools", rows))
        items, nbytes, occ, frag = d["items"], d["bytes"], d["occupancy"], d["fragmentation"]
        parts.append(
            _kv_table(
                "Fallback to the CPU path",
                [
                    (
                        "by items",
                        _share(items["fallback"], items["total"], size=False),
                    ),
                    (
                        "by bytes",
                        _share(nbytes["fallback"], nbytes["total"]),
                    ),
                    (
                        "slot-cap misses",
                        f"{items['slot_cap_misses']} (misses with all {d['max_inflight_slices']} slots in flight)",
                    ),
                    (
                        "target",
                        f"≤ {float(report.target):g} by {report.basis}: {'met' if report.meets_target else 'not met'}",
                    ),
                ],
            )
        )
        usable = d["usable_bytes_per_worker"]
        parts.append(
            _kv_table(
                "Occupancy (per worker pool)",
                [
                    (
                        "peak",
                        f"{_size(occ['peak_bytes'])} ({_pct(occ['peak_bytes'], usable)}), "
                        f"{occ['peak_leases']} lease{'' if occ['peak_leases'] == 1 else 's'} in flight",
                    ),
                    (
                        "mean",
                        "n/a"
                        if occ["mean_bytes"] is None
                        else f"{_size(occ['mean_bytes'])} ({_pct(occ['mean_bytes'], usable)}) "
                        f"over {d['duration_ns'] / 1e9:.2f} s",
                    ),
                ],
            )
        )
        if frag["space_misses"]:
            parts.append(
                _kv_table(
                    "At misses for space",
                    [
                        ("misses", str(frag["space_misses"])),
                        ("with enough free bytes in pieces", str(frag["misses_with_enough_free_bytes"])),
                        ("mean free", _size(frag["mean_free_bytes_at_miss"])),
                        ("mean largest free range", _size(frag["mean_largest_free_range_at_miss"])),
                    ],
                )
            )
    if report.search is not None:
        parts.append(_search_human(report))
    return Group(*parts)


def _search_human(report: SimulationReport) -> RenderableType:
    s = report.search
    assert s is not None
    parts: list[RenderableType] = [Text("Smallest budget", style="bold")]
    if s.smallest_mb is None:
        parts.append(
            Text(
                f"No budget up to {s.trials[-1].mb} MiB meets the target: the misses left are slot-cap misses "
                "or features larger than a worker's share."
            )
        )
        return Group(*parts)
    how = "bisection, checked one MiB below" if s.method == "bisect" else "every budget scanned"
    parts.append(Text(f"SGLANG_MM_FEATURE_CACHE_MB={s.smallest_mb} ({how}; {len(s.trials)} budgets simulated)"))
    table = Table(box=None, pad_edge=False)
    table.add_column("MiB", justify="right")
    table.add_column("fallback items", justify="right")
    table.add_column("fallback bytes", justify="right")
    for t in s.trials:
        table.add_row(str(t.mb), f"{t.fallback_items} / {t.items}", f"{_size(t.fallback_bytes)}")
    parts.append(table)
    if report.settings is not None:
        parts.append(Text("Settings to copy", style="bold"))
        lines = [f"export {k}={shlex.quote(v)}" for k, v in report.settings.env.items()]
        lines.append("sglang serve --model-path MODEL " + " ".join(shlex.quote(a) for a in report.settings.args))
        parts.append(Text("\n".join(lines)))
    return Group(*parts)
