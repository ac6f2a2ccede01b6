"""``mmpool check``: one launch command and its environment, read and planned as the engine would."""

from __future__ import annotations

import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from decimal import Decimal
from fractions import Fraction
from typing import TYPE_CHECKING, Any

from mmpool_cli.core.findings import Finding, Severity
from mmpool_cli.core.reports import Report
from mmpool_cli.engines import DEFAULT, engine
from mmpool_cli.errors import MmpoolError

if TYPE_CHECKING:
    from mmpool_cli.tune.split import Row

TRAFFIC = "traffic"  # where the findings of --from are located: the traffic, not a word of the launch


@dataclass(frozen=True)
class TrafficBounds:
    """``check --from FILE``: what the launch is held to over that traffic (None: not asked)."""

    max_fallback: int | None = None  # --max-fallback: the most features that may fall back to the CPU path
    min_prefix_hit: Fraction | None = None  # --min-prefix-hit: the least share of prompt tokens served, in %


def check(
    argv: list[str],
    environ: Mapping[str, str],
    assumptions: Any,
    *,
    env_file_findings: list[Finding] | None = None,
    strict: bool = False,
    sglang_version: str,
    sglang_version_chosen: str,
    engine_name: str = DEFAULT,
) -> Report:
    """The report on ``argv``: the launch command as one input, the environment's file findings first.

    ``assumptions`` are the engine's (what cannot be known offline); never raises for bad input.
    """
    result = engine(engine_name).read_launch(argv, environ, assumptions)
    if env_file_findings:
        result = replace(result, findings=env_file_findings + result.findings)
    return Report(
        command="check",
        results=[result],
        strict=strict,
        sglang_version=sglang_version,
        sglang_version_chosen=sglang_version_chosen,
        engine=engine_name,
    )


def prefix_hit(row: Row) -> Fraction | None:
    """The share of the traffic's prompt tokens the prefix cache serves at ``row``'s KV capacity, in %;
    None where the traffic has no prompt tokens to serve."""
    m = row.measures
    return None if m.prompt_tokens == 0 else Fraction(100 * m.prefix_served_tokens, m.prompt_tokens)


def _shell_word(word: str) -> str:
    """``word`` as a POSIX shell reads it back, in double quotes where it needs quoting (the command said is
    itself set in single quotes)."""
    if shlex.quote(word) == word:
        return word
    return '"' + "".join("\\" + c if c in '"\\$`' else c for c in word) + '"'


def _pct(value: Fraction) -> str:
    hundredths = value.numerator * 100 // value.denominator  # floored, so a shown 99.99% never reads as 100%
    return f"{hundredths // 100}.{hundredths % 100:02d}%"


def _given(value: Fraction) -> str:
    """A bound as the user wrote it (it came from a decimal: exact), without trailing zeros."""
    text = format(Decimal(value.numerator) / Decimal(value.denominator), "f")
    return text.rstrip("0").rstrip(".") if "." in text else text


@dataclass(frozen=True)
class _Fallback:
    """What a row's ``fallback_items`` count in one engine's words, for one item and for several."""

    counted: tuple[str, str]  # after the count, in the measures: "N <counted>"
    items: tuple[str, str]  # the items, in the error: "N <items> of SOURCE <over>"
    over: tuple[str, str]
    tune: str  # the tune command that gives a split where fewer do

    def said(self, words: tuple[str, str], n: int) -> str:
        return words[0] if n == 1 else words[1]


_FALLBACK = {
    "sglang": _Fallback(
        ("feature falls back to the CPU path", "features fall back to the CPU path"),
        ("feature", "features"),
        ("falls back to the CPU path", "fall back to the CPU path"),
        "mmpool tune --from {source}",
    ),
    "vllm": _Fallback(
        (
            "video refused by the GPU decode pool (it fails its request)",
            "videos refused by the GPU decode pool (each fails its request)",
        ),
        ("video", "videos"),
        (
            "is refused by the GPU decode pool (it fails its request)",
            "are refused by the GPU decode pool (each fails its request)",
        ),
        "mmpool tune --engine vllm --from {source}",
    ),
}


def traffic_findings(
    row: Row, source: str | Sequence[str], bounds: TrafficBounds, engine_name: str = DEFAULT
) -> list[Finding]:
    """The launch's own row over the traffic (``Engine.tune_at(request, None)``, the row ``tune`` scores as
    today's) held to ``bounds``: an info finding with its measures, an error for each bound it breaks. The
    findings and bounds are the same for every engine; what falls back is said in ``engine_name``'s words
    (SGLang: features over the CPU path; vLLM: videos its GPU decode pool refuses).

    ``source``: the traffic's files (each its own ``--from`` in the tune command said), or one name.
    A bound on prefix hits over traffic that carries no prompt tokens cannot be judged: ``MmpoolError``."""
    files = [source] if isinstance(source, str) else list(source)
    source = ", ".join(files)
    words = _FALLBACK[engine_name]
    tune = words.tune.format(source=" --from ".join(_shell_word(f) for f in files))
    m = row.measures
    hit = prefix_hit(row)
    if bounds.min_prefix_hit is not None and hit is None:
        raise MmpoolError(
            f"--min-prefix-hit: the traffic of {source} carries no prompt text to replay, so the prefix cache's "
            "hits cannot be judged; give a log with the prompts (OpenAI bodies, a level 3 request log)"
        )
    if hit is None:
        served = "no prompt tokens"
    else:
        served = f"{m.prefix_served_tokens:,} of {m.prompt_tokens:,} prompt tokens ({_pct(hit)})"
    settings = ", ".join(f"{name} {value:,}" for name, value in row.values.items())
    said = (
        f"over {source} ({m.requests:,} requests) at the launch's settings ({settings}): "
        f"{m.fallback_items:,} {words.said(words.counted, m.fallback_items)}; the prefix cache serves {served}; "
        f"{m.encoder_tokens:,} encoder tokens computed; {m.kv_tokens:,} KV tokens"
    )
    found = [Finding(Severity.info, "tune-measures", said, TRAFFIC)]
    if bounds.max_fallback is not None and m.fallback_items > bounds.max_fallback:
        found.append(
            Finding(
                Severity.error,
                "tune-fallback-over",
                f"{m.fallback_items:,} {words.said(words.items, m.fallback_items)} of {source} "
                f"{words.said(words.over, m.fallback_items)} at the launch's settings, "
                f"more than --max-fallback {bounds.max_fallback:,}; '{tune}' gives a split where fewer do",
                TRAFFIC,
            )
        )
    if bounds.min_prefix_hit is not None and hit is not None and hit < bounds.min_prefix_hit:
        found.append(
            Finding(
                Severity.error,
                "tune-prefix-hit-under",
                f"over {source}, the prefix cache serves {served} at the launch's KV capacity "
                f"({m.kv_tokens:,} tokens), below --min-prefix-hit {_given(bounds.min_prefix_hit)}%; "
                f"'{tune}' shows what more KV buys",
                TRAFFIC,
            )
        )
    return found
