"""Renderers: results to text (JSON, GitHub annotations) or rich renderables; they never print.

One registry maps each result kind and format to its renderer. Each renderer imports its module
on call, so ``--format json`` and ``--format github`` never load rich.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Rich:
    """A rich renderable for a terminal; ``soft_wrap`` lets long lines run on (one finding per line)."""

    renderable: Any
    soft_wrap: bool = False


Rendered = str | Rich
Renderer = Callable[..., Rendered]


def _plan_json(plan: Any) -> str:
    from mmpool_cli.render.text import to_json

    return to_json(plan)


def _plan_human(plan: Any) -> Rich:
    from mmpool_cli.render.human import plan_human

    return Rich(plan_human(plan))


def _probe_human(report: Any) -> Rich:
    from mmpool_cli.render.human import probe_human

    return Rich(probe_human(report))


def _report_json(report: Any, *, verbose: bool = False, launch: list[str] | None = None, quiet: bool = False) -> str:
    import json

    from mmpool_cli.render.text import report_data

    # one line: the C encoder is 5x faster than indented output on 1,000-file reports
    return json.dumps(report_data(report, launch), ensure_ascii=False)


def _report_github(report: Any, *, verbose: bool = False, launch: list[str] | None = None, quiet: bool = False) -> str:
    from mmpool_cli.render.text import report_github

    return report_github(report)


def _report_sarif(report: Any, *, verbose: bool = False, launch: list[str] | None = None, quiet: bool = False) -> str:
    from mmpool_cli.render.sarif import report_sarif

    return report_sarif(report)


def _report_human(
    report: Any, *, verbose: bool = False, launch: list[str] | None = None, quiet: bool = False
) -> Rendered:
    if quiet:
        from mmpool_cli.render.text import report_quiet

        return report_quiet(report)
    from mmpool_cli.render.human import report_human

    # soft wrap: one finding per line, as a compiler prints them, wrapped by the terminal
    return Rich(report_human(report, verbose), soft_wrap=True)


def _simulate_json(report: Any, *, events: bool = False) -> str:
    import json

    data = report.to_data(events=events)
    # one line with --events: a million decisions indented would be most of the output
    return json.dumps(data, ensure_ascii=False) if events else json.dumps(data, indent=2, ensure_ascii=False)


def _simulate_human(report: Any, *, events: bool = False) -> Rich:
    from mmpool_cli.render.simulation import simulate_human

    # soft wrap: the settings to copy must stay one line each
    return Rich(simulate_human(report), soft_wrap=True)


def _vllm_plan_json(plan: Any) -> str:
    import json

    return json.dumps(plan.to_data(), indent=2, ensure_ascii=False)


def _vllm_plan_human(plan: Any) -> Rich:
    from mmpool_cli.render.vllm_text import plan_text

    return Rich(plan_text(plan))


def _vllm_caches_json(report: Any) -> str:
    import json

    return json.dumps(report, indent=2, ensure_ascii=False)


def _vllm_caches_human(report: Any) -> Rich:
    from mmpool_cli.render.vllm_caches import caches_text

    return Rich(caches_text(report))


RENDERERS: dict[str, dict[str, Renderer]] = {
    "vllm-plan": {"human": _vllm_plan_human, "json": _vllm_plan_json},
    "vllm-caches": {"human": _vllm_caches_human, "json": _vllm_caches_json},
    "plan": {"human": _plan_human, "json": _plan_json},
    "probe": {"human": _probe_human, "json": _plan_json},
    "simulate": {"human": _simulate_human, "json": _simulate_json},
    "report": {"human": _report_human, "json": _report_json, "github": _report_github, "sarif": _report_sarif},
}


# A byte that is not UTF-8 in a file name reaches Python as a lone surrogate (PEP 383).
_REPR_UNDECODABLE = re.compile(r"(\\\\|\\)udc([89a-f][0-9a-f])")
_UNDECODABLE = re.compile("[\udc80-\udcff]")


def escape_undecodable(text: str, *, json: bool = False) -> str:
    """``bad\\xff.yaml`` for a file name with the byte 0xff: text never carries raw bytes.

    In JSON the backslash is itself escaped, so the string decodes to the same ``\\xff``.
    """
    slash = "\\\\" if json else "\\"
    text = _REPR_UNDECODABLE.sub(r"\1x\2", text)  # a repr() of such a name already spelt it '\udcff'
    return _UNDECODABLE.sub(lambda m: f"{slash}x{ord(m[0]) - 0xDC00:02x}", text)


def render(kind: str, fmt: str, result: Any, **options: Any) -> Rendered:
    """``result`` (a plan, a probe report or a validate/check report) in format ``fmt``."""
    output = RENDERERS[kind][fmt](result, **options)
    if isinstance(output, str):
        return escape_undecodable(output, json=fmt in ("json", "sarif"))
    return output
