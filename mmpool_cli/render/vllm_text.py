"""A vLLM plan for a terminal: the three memories, each item, the findings.

Returns a renderable laid out by ``render.layout`` at the console's width, as SGLang's plan is:
lines wrap at words and never inside a number. Never prints.
"""

from __future__ import annotations

from typing import Any

from rich.console import Group, RenderableType
from rich.text import Text

from mmpool_cli.core.units import format_size
from mmpool_cli.engines.vllm.versions import how_chosen
from mmpool_cli.render.human import Laid, findings_table, paragraph
from mmpool_cli.render.layout import Grid, Rows, Span


def _b(n: int | None) -> str:
    return "unknown" if n is None else format_size(n)


def _n(n: int | None) -> str:
    return "unknown" if n is None else f"{n:,}"


def _rows(title: str, rows: list[tuple[str, str]]) -> Laid:
    return Laid(Rows(title, [(k, [(v, None)]) for k, v in rows], key_style=None))


def plan_text(plan: Any) -> RenderableType:
    """The human report of a ``VllmPlan``."""
    data = plan.to_json()
    pc, enc, pool = data["processor_cache"], data["encoder_cache"], data["gpu_decode_pool"]
    verdict = ("OK", "bold green") if plan.ok else ("FAIL", "bold red")
    parts: list[RenderableType] = [
        Text.assemble("mmpool plan: ", verdict, f"  (vLLM {data['version']} ({how_chosen(data['version_source'])}))")
    ]
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
    processing = data.get("item_processing")
    if processing is not None:
        rows.append(("items' pixels", f"{processing['pixel_dtype']}  [{processing['why']}]"))
    parts.append(_rows("Processor cache (host RAM)", rows))
    per = ", ".join(f"{m} {n:,}" for m, n in enc["per_modality"].items())
    rows = [
        ("max_num_batched_tokens", f"{_n(enc['max_num_batched_tokens'])}  [{enc['max_num_batched_tokens_source']}]"),
        ("largest item", f"{_n(enc['max_tokens_per_item'])}" + (f"  ({per})" if per else "")),
        ("budget", f"{_n(enc['budget_tokens'])} tokens"),
        ("budget bytes", _b(enc["budget_bytes"])),
    ]
    parts.append(_rows("Encoder cache (GPU, per worker)", rows))
    if enc["items"]:
        cells: list[list[list[Span]]] = [
            [
                [(i["item"], None)],
                [(f"{i['tokens']:,}", None)],
                [("yes" if i["fits"] else "NO", None)],
                [("" if i["processor_bytes"] is None else f"{i['processor_bytes']:,} B", None)],
            ]
            for i in enc["items"]
        ]
        parts.append(Laid(Grid(None, ["item", "tokens", "fits", "processed"], cells, right={1, 3}, rule=False)))
    if pool is None:
        parts.append(Laid(Rows("GPU decode pool (--mm-ipc-gpu-memory-gb)", [])))
        parts.append(paragraph("off (0 GiB)"))
    else:
        rows = [
            ("total", _b(pool["total_bytes"])),
            ("per API process", f"{pool['api_processes']} × {_b(pool['bytes_per_process'])}"),
        ]
        if pool["decoder_bytes"]:  # a GPU video backend: its decoders' memory is reserved with the pool
            each = f"  [decoder surfaces and a CUDA context in each of {pool['api_processes']} API process(es)]"
            rows.append(("decoders", _b(pool["decoder_bytes"]) + each))
            why = f"  [the pool's {pool['total_bytes']:,} B + the decoders' {pool['decoder_bytes']:,} B]"
        else:
            why = "  [the pool]"
        rows.append(("taken from each worker's KV", _b(pool["kv_reserved_bytes"]) + why))
        per_token = pool.get("kv_bytes_per_token")
        rows.append(
            (
                "KV bytes per token",
                "unknown (a model directory with config.json gives it)" if per_token is None else f"{per_token:,} B",
            )
        )
        if pool.get("kv_tokens_min") is not None:
            rows.append(("KV tokens lost per worker", f"{pool['kv_tokens_min']:,}-{pool['kv_tokens_max']:,}"))
        parts.append(_rows("GPU decode pool (--mm-ipc-gpu-memory-gb)", rows))
        if pool["items"]:
            cells = [
                [[(i["item"], None)], [(f"{i['bytes']:,} B", None)], [("fits" if i["fits"] else "TOO LARGE", None)]]
                for i in pool["items"]
            ]
            parts.append(Laid(Grid(None, ["video", "decode", "fits"], cells, right={1}, rule=False)))
    if plan.findings:
        parts.append(findings_table(plan.findings, "Findings"))
    else:
        parts.append(paragraph("No findings."))
    return Group(*parts)
