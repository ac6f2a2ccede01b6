"""A vLLM plan as text for a terminal: the three memories, each item, the findings.

Returns the text; never prints. Numbers are never cut: exact bytes beside a binary reading.
"""

from __future__ import annotations

from typing import Any

from mmpool_cli.core.units import format_binary


def _b(n: int | None) -> str:
    return "unknown" if n is None else f"{n:,} B ({format_binary(n)})"


def _n(n: int | None) -> str:
    return "unknown" if n is None else f"{n:,}"


def _table(rows: list[tuple[str, str]]) -> list[str]:
    width = max((len(k) for k, _ in rows), default=0)
    return [f"{k.ljust(width)}  {v}" for k, v in rows]


def plan_text(plan: Any) -> str:
    """The human report of a ``VllmPlan``."""
    data = plan.to_json()
    pc, enc, pool = data["processor_cache"], data["encoder_cache"], data["gpu_decode_pool"]
    status = "OK" if plan.ok else "FAIL"
    out = [f"mmpool plan: {status}  (vLLM {data['version']} ({data['version_source']}))", "Processor cache (host RAM)"]
    rows = [
        (
            "layout",
            f"{pc['layout']}" + ("" if pc["layout"] == pc["requested_type"] else f" (asked: {pc['requested_type']})"),
        ),
        ("API processes", str(pc["api_processes"])),
        ("one cache", _b(pc["cache_bytes"])),
        ("engine core", _b(pc["engine_core_bytes"])),
        ("each API process", _b(pc["api_process_bytes"]) + "  [its cache + the render-only cache]"),
        ("/dev/shm", _b(pc["shm_bytes"])),
        ("host RAM, at most", _b(pc["host_bytes"])),
    ]
    out += _table(rows)
    out.append("Encoder cache (GPU, per worker)")
    per = ", ".join(f"{m} {n:,}" for m, n in enc["per_modality"].items())
    rows = [
        ("max_num_batched_tokens", f"{_n(enc['max_num_batched_tokens'])}  [{enc['max_num_batched_tokens_source']}]"),
        ("largest item", f"{_n(enc['max_tokens_per_item'])}" + (f"  ({per})" if per else "")),
        ("budget", f"{_n(enc['budget_tokens'])} tokens"),
        ("budget bytes", _b(enc["budget_bytes"])),
    ]
    out += _table(rows)
    if enc["items"]:
        out.append("item                          tokens   fits")
        for item in enc["items"]:
            out.append(f"{item['item']:<28}  {item['tokens']:>7,}   {'yes' if item['fits'] else 'NO'}")
    out.append("GPU decode pool (--mm-ipc-gpu-memory-gb)")
    if pool is None:
        out.append("off (0 GiB)")
    else:
        rows = [
            ("total", _b(pool["total_bytes"])),
            ("per API process", f"{pool['api_processes']} × {_b(pool['bytes_per_process'])}"),
            ("taken from each worker's KV", _b(pool["kv_reserved_bytes"])),
        ]
        if pool.get("kv_tokens_min") is not None:
            rows.append(("KV tokens lost per worker", f"{pool['kv_tokens_min']:,}-{pool['kv_tokens_max']:,}"))
        out += _table(rows)
        for item in pool["items"]:
            out.append(f"{item['item']:<28}  {item['bytes']:>15,} B   {'fits' if item['fits'] else 'TOO LARGE'}")
    if plan.findings:
        out.append("Findings")
        for f in plan.findings:
            where = f" [{f.location}]" if f.location else ""
            out.append(f"{f.severity.value:<8} {f.code}: {f.message}{where}")
    return "\n".join(out)
