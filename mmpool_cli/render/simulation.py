"""The human rendering of ``mmpool simulate``: what fell back, how full the pools ran, the budget to set."""

from __future__ import annotations

import dataclasses
import shlex
from fractions import Fraction

from rich.console import Group, RenderableType
from rich.text import Text

from mmpool_cli.core import words
from mmpool_cli.core.units import format_binary, format_size
from mmpool_cli.pools.budget_search import BudgetSearch
from mmpool_cli.pools.report import SimulationReport, result_data
from mmpool_cli.render.curve_plot import proof_bound
from mmpool_cli.render.human import Laid, _kv_cost_table, _kv_table, findings_table, launch_line, paragraph
from mmpool_cli.render.layout import Grid, Span
from mmpool_cli.render.text import version_note


def _target(rate: Fraction) -> str:
    """A target rate exactly: a percentage of up to 4 decimals (1%, 0.5%), else the fraction (1/3)."""
    pct = rate * 100
    places = next((p for p in range(5) if (pct * 10**p).denominator == 1), None)
    if places is None:
        return f"{rate.numerator}/{rate.denominator}"
    digits = str(int(pct * 10**places)).rjust(places + 1, "0")
    return (f"{digits[:-places]}.{digits[-places:]}" if places else digits) + "%"


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
    if report.status == "ok":
        verdict = ("OK", "bold green")
    elif report.result is not None and not report.meets_target:
        verdict = ("FALLBACK", "bold red")
    else:
        verdict = ("FAIL", "bold red")
    source = report.source.get("trace") or "synthetic workload"
    parts.append(
        paragraph(
            "mmpool simulate: ",
            verdict,
            f"  ({version_note(report.sglang_version, report.sglang_version_chosen)}, {report.transport}, {source})",
        )
    )
    if report.source.get("assumptions"):
        parts.append(paragraph(f"assumptions: {report.source['assumptions']}"))
    # a recording's comparison is the answer to a replay of it: shown, info or not
    shown = [f for f in report.findings if f.severity.value != "info" or f.code.startswith("record-")]
    if shown:
        parts.append(findings_table(shown))
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
                f"{d['workers']} × {format_size(d['per_worker_bytes'])}, {format_size(d['usable_bytes_per_worker'])} "
                "usable each"
                + (f", {d['lease_control_bytes']} B of ack words per chunk" if report.transport == "cuda_vmm" else ""),
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
                        f"{items['slot_cap_misses']} (misses with all {d['max_inflight_slices']} slots in flight)"
                        if d["max_inflight_slices"] is not None
                        else "none (cuda_vmm has no slot cap)",
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
                        else "0 B: every lease was given back at the recycler tick that saw it taken "
                        "(acknowledged on arrival, arriving on a tick)"
                        if occ["mean_bytes"] == 0 and occ["peak_bytes"]
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
    if report.curve is not None:
        parts.append(_curve_human(report))
    if report.search is not None:
        parts.append(_search_human(report))
    return Group(*parts)


def _curve_human(report: SimulationReport) -> RenderableType:
    """The pool's curve: every point's fallback and KV tokens, the smallest safe budget marked."""
    c = report.curve
    assert c is not None
    found = None if report.search is None else report.search.smallest_mb
    bound = None if report.search is None else proof_bound(report.search)
    mark = "◀ smallest safe" if bound is None else "◀ smallest safe, NOT PROVEN"
    lo_why = "as given" if c.lo_given else "the largest feature's need"
    hi_why = "as given" if c.hi_given else "the budget at which no alloc can miss"
    if not c.hi_given and c.no_miss_mb > c.hi_mb:
        hi_why = "the largest budget plan accepts; some alloc misses at every budget"
    count = len(c.points)
    spread = "" if count == c.asked_points else f" (every whole MiB of the range; {c.asked_points} asked)"
    parts: list[RenderableType] = [
        paragraph(("Pool curve", "bold")),
        paragraph(
            f"{count} budget{'' if count == 1 else 's'}{spread} from {c.lo_mb} MiB ({lo_why}) to {c.hi_mb} MiB "
            f"({hi_why}), each an exact replay"
        ),
    ]
    with_kv = any(p.kv_tokens is not None for p in c.points)
    rows: list[list[list[Span]]] = []
    for p in c.points:
        row: list[list[Span]] = [
            [(str(p.budget_mb), None)],
            [(f"{p.fallback_items} / {p.items} ({_pct(p.fallback_items, p.items)})", None)],
            [(f"{_size(p.fallback_bytes)} ({_pct(p.fallback_bytes, p.bytes)})", None)],
        ]
        if with_kv:
            row.append([("n/a" if p.kv_tokens is None else f"{p.kv_tokens:,}", None)])
        row.append([(mark if p.budget_mb == found else "", None if bound is None else "yellow")])
        rows.append(row)
    headers = ["MiB", "fallback items", "fallback bytes", *(["KV tokens"] if with_kv else []), ""]
    right = {0, 1, 2, 3} if with_kv else {0, 1, 2}
    parts.append(Laid(Grid(None, headers, rows, right=right, gap=2, rule=False)))
    if found is not None and all(p.budget_mb != found for p in c.points):
        unproven = "," if bound is None else ", NOT PROVEN,"
        parts.append(paragraph(f"the smallest safe budget{unproven} {found} MiB, is not one of the points (below)"))
    if bound is not None:
        parts.append(paragraph((f"the mark is not proven: {bound} (below)", "yellow")))
    if not with_kv:
        parts.append(paragraph(f"KV tokens per budget: {c.kv_unknown or 'unknown'}"))
    return Group(*parts)


def _search_human(report: SimulationReport) -> RenderableType:
    s = report.search
    assert s is not None
    title = "Smallest safe budget" if s.method == "safe" else "Smallest budget"
    parts: list[RenderableType] = [paragraph((title, "bold"))]
    if s.smallest_mb is None:
        parts.append(
            paragraph(
                f"No budget up to {s.top_mb} MiB meets the target: the misses left are slot-cap misses "
                "or features larger than a worker's share."
            )
        )
        return Group(*parts)
    simulated = f"{words.count(len(s.trials), 'budget')} simulated"
    if not s.exact and s.checked_mb is not None:
        lo, hi = s.checked_mb
        parts.append(
            paragraph(
                (
                    f"SGLANG_MM_FEATURE_CACHE_MB={s.smallest_mb} (not proven: the search stopped at --search-limit "
                    f"after {simulated}, {s.spent_events:,} events replayed; every budget from {lo} to {hi} MiB "
                    f"meets the target{_work_left(s)})",
                    "yellow",
                )
            )
        )
    elif s.method == "safe":
        top = (
            "twice it"
            if s.upper_mb == 2 * s.smallest_mb
            else ("the budget at which no alloc can miss" if s.upper_mb == s.no_miss_mb else "the largest plan accepts")
        )
        parts.append(
            paragraph(
                f"SGLANG_MM_FEATURE_CACHE_MB={s.smallest_mb} (safe: every budget from it to {s.upper_mb} MiB, "
                f"{top}, meets the target; exact, {simulated})"
            )
        )
        if s.fragile_mb is not None:
            parts.append(
                paragraph(
                    (
                        f"fragile: {s.fragile_mb} MiB also meets the target, but a budget between it and "
                        f"{s.smallest_mb} MiB does not",
                        "yellow",
                    )
                )
            )
    else:
        how = "an estimate: bisection, checked one MiB below" if s.method == "bisect" else "every budget below scanned"
        parts.append(paragraph(f"SGLANG_MM_FEATURE_CACHE_MB={s.smallest_mb} ({how}; {simulated})"))
    trials = [] if report.curve is not None else s.trials  # a curve's table gives the figures
    if len(trials) > 40:  # the table is for reading: the budgets around the answer
        near = sorted(trials, key=lambda t: (abs(t.mb - (s.smallest_mb or 0)), t.mb))[:30]
        trials = sorted(near, key=lambda t: t.mb)
        nearest = f"the 30 simulated budgets nearest the answer, of {len(s.trials)} (all in --format json):"
        parts.append(paragraph(nearest))
    trials = [
        t
        for i, t in enumerate(trials)
        if not any(o.mb < t.mb and o.same_until_mb >= max(t.mb, t.same_until_mb) for o in trials[max(0, i - 8) : i])
    ]
    over = f"> {_target(s.target)}"  # a stopped trial: the fallback passed the target, and no more is known
    rows: list[list[list[Span]]] = [
        [
            [(str(t.mb) if t.same_until_mb <= t.mb else f"{t.mb}-{t.same_until_mb}", None)],
            [
                (
                    f"{over} ({t.fallback_items} so far)"
                    if t.stopped and s.basis == "items"
                    else (f"≥ {t.fallback_items} so far" if t.stopped else f"{t.fallback_items} / {t.items}"),
                    None,
                )
            ],
            [
                (
                    f"{over} ({_size(t.fallback_bytes)} so far)"
                    if t.stopped and s.basis == "bytes"
                    else (f"≥ {_size(t.fallback_bytes)} so far" if t.stopped else _size(t.fallback_bytes)),
                    None,
                )
            ],
        ]
        for t in trials
    ]
    headers = ["MiB", "fallback items", "fallback bytes"]
    if rows:
        parts.append(Laid(Grid(None, headers, rows, right={0, 1, 2}, gap=2, rule=False)))
    if any(t.stopped for t in trials):
        parts.append(paragraph(f"{over}: the replay stopped once that budget's fallback passed the target"))
    if report.kv_cost is not None:
        parts.append(_kv_cost_table(report.kv_cost))
    if report.settings is not None:
        parts.append(Text("Settings to copy", style="bold"))
        lines = [f"export {k}={shlex.quote(v)}" for k, v in report.settings.env.items()]
        given = report.model if report.model and "/" in report.model else None  # a directory or hub id
        lines.append(launch_line(dataclasses.replace(report.settings, model_path=report.settings.model_path or given)))
        parts.append(Text("\n".join(lines)))
    return Group(*parts)


def _work_left(s: BudgetSearch) -> str:
    """What proving the answer still needs, and where to get it."""
    if s.undecided is None:
        return "; raise --search-limit to finish"
    undecided, lo, hi = s.undecided
    verb = "is" if undecided == 1 else "are"
    return (
        f"; {words.count(undecided, 'budget')} from {lo} to {hi} MiB {verb} undecided: "
        f"at most {s.more_events:,} more events (raise --search-limit; --executor ray spreads them over a cluster)"
    )
