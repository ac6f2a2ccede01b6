"""The types of ``mmpool tune``'s answer, and the grid of candidate splits of one budget.

A split gives each memory of the engine a setting in its own unit (whole MiB, tokens, blocks); one
memory (the KV cache) takes what the others leave. Every candidate is scored by the engine
(``Measures``); ``front`` keeps the rows no other row beats on every measure. All sizes are integer
bytes. Neutral: knows no engine; standard library only (and ``core``).
"""

from __future__ import annotations

import bisect
import itertools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

from mmpool_cli.core.findings import Note

SCHEMA_VERSION = 1
MAX_CANDIDATES = 4096  # the grid's rows: every one is scored, so the grid is bounded


@dataclass(frozen=True)
class Memory:
    """One memory a split divides: its name, the setting that sizes it, and that setting's unit."""

    name: str  # "kv" | "pool" | "embedding" (SGLang) | "encoder" | "decode_pool" (vLLM)
    setting: str  # the flag or variable that sets it: "--max-total-tokens", "SGLANG_MM_FEATURE_CACHE_MB", ...
    unit: str  # "tokens" | "MiB" | "blocks"


@dataclass(frozen=True)
class Measures:
    """One candidate's answer over the traffic; integers only (ratios are derived, as ``Fraction``)."""

    requests: int
    prompt_tokens: int  # of the traffic, all requests
    prefix_served_tokens: int  # prompt tokens the prefix cache served
    encoder_tokens: int  # encoder tokens computed (embedding / encoder cache misses, after the prefix cache)
    fallback_items: int  # features the pool could not place (SGLang), decode-pool refusals (vLLM); 0 where none
    fallback_bytes: int
    kv_tokens: int  # the KV capacity left, in tokens
    batch: int  # the most of the traffic's own requests whose tokens fit the KV at once (``batch_of``)

    @property
    def prefill_tokens(self) -> int:
        """Prompt tokens computed: those the prefix cache did not serve."""
        return self.prompt_tokens - self.prefix_served_tokens

    @property
    def work(self) -> int:
        """Prefill and encoder tokens computed over the whole traffic."""
        return self.prefill_tokens + self.encoder_tokens

    @property
    def work_per_request(self) -> Fraction:
        return Fraction(self.work, self.requests) if self.requests else Fraction(0)

    def to_data(self) -> dict[str, Any]:
        """JSON-safe: the integers, then the derived ones (a ratio as its two integers' quotient, a string)."""
        return {
            "requests": self.requests,
            "prompt_tokens": self.prompt_tokens,
            "prefix_served_tokens": self.prefix_served_tokens,
            "prefill_tokens": self.prefill_tokens,
            "encoder_tokens": self.encoder_tokens,
            "work_tokens": self.work,
            "work_per_request": str(self.work_per_request),
            "fallback_items": self.fallback_items,
            "fallback_bytes": self.fallback_bytes,
            "kv_tokens": self.kv_tokens,
            "batch": self.batch,
        }


@dataclass(frozen=True)
class Row:
    """One candidate split: each memory's setting and bytes, what it measures, and how it stands."""

    values: dict[str, int]  # memory name -> its setting in its unit (whole MiB, tokens, blocks)
    bytes: dict[str, int]  # memory name -> the bytes per rank it takes
    measures: Measures
    settings: tuple[str, ...]  # the lines to copy (environment variables and flags)
    today: bool = False  # the user's current launch
    on_front: bool = False
    recommended: bool = False
    assumed: tuple[int, ...] = ()  # indices into the report's assumptions this row's figures depend on
    # the separate commands' own figures behind the measures (e.g. the embedding cache's hits and lookups),
    # so that each can be held to what that command prints
    figures: dict[str, int] = field(default_factory=dict)

    def to_data(self) -> dict[str, Any]:
        return {
            "values": dict(self.values),
            "bytes": dict(self.bytes),
            "measures": self.measures.to_data(),
            "settings": list(self.settings),
            "today": self.today,
            "on_front": self.on_front,
            "recommended": self.recommended,
            "assumed": list(self.assumed),
            "figures": dict(self.figures),
        }


TuneNote = Note  # a finding of ``mmpool tune``: the same as ``cache``'s, so a cache's findings pass as they are


@dataclass(frozen=True)
class TuneReport:
    """``mmpool tune``'s answer: the memory divided, every candidate scored, the front and the recommendation."""

    engine: str  # the engine's title and release, e.g. "SGLang 0.5.23"
    version: str
    source: str  # the traffic read
    budget_bytes: int  # the memory divided, per rank
    budget_origin: str  # how it was found ("--budget 20GiB", "today's launch: ...")
    memories: tuple[Memory, ...]
    rows: tuple[Row, ...]  # every candidate scored, today's included
    objective: str
    assumptions: tuple[str, ...] = ()  # each stated once; rows name those they depend on
    notes: tuple[TuneNote, ...] = ()
    # "ok" where today's launch measures as the recommended split does under the objective (or there is
    # no today's row), else "fail": the change buys something (``front.mark`` decides it)
    status: str = "ok"

    @property
    def recommended(self) -> Row:
        return next(r for r in self.rows if r.recommended)

    @property
    def today(self) -> Row | None:
        return next((r for r in self.rows if r.today), None)

    def to_data(self) -> dict[str, Any]:
        """The versioned JSON payload (docs/formats.md): ``schema_version`` and ``status`` first."""
        rec = self.recommended
        today = self.today
        return {
            "schema_version": SCHEMA_VERSION,
            "status": self.status,
            "engine": self.engine,
            "version": self.version,
            "source": self.source,
            "budget_bytes": self.budget_bytes,
            "budget_origin": self.budget_origin,
            "memories": [{"name": m.name, "setting": m.setting, "unit": m.unit} for m in self.memories],
            "objective": self.objective,
            "recommended": self.rows.index(rec),
            "today": None if today is None else self.rows.index(today),
            "settings": list(rec.settings),
            "gain": None if today is None else gain(today.measures, rec.measures),
            "assumptions": list(self.assumptions),
            "rows": [r.to_data() for r in self.rows],
            "findings": [{"code": n.code, "severity": n.severity, "message": n.message} for n in self.notes],
        }


def gain(today: Measures, tuned: Measures) -> dict[str, int]:
    """What the tuned split buys over today's: each measure's change (tuned less today's)."""
    return {
        "prefix_served_tokens": tuned.prefix_served_tokens - today.prefix_served_tokens,
        "encoder_tokens": tuned.encoder_tokens - today.encoder_tokens,
        "work_tokens": tuned.work - today.work,
        "fallback_items": tuned.fallback_items - today.fallback_items,
        "fallback_bytes": tuned.fallback_bytes - today.fallback_bytes,
        "kv_tokens": tuned.kv_tokens - today.kv_tokens,
        "batch": tuned.batch - today.batch,
    }


class Batches:
    """The most requests of the traffic that fit a KV cache at once, at any number of its sizes: the
    shortest first (each its prompt and output tokens, as the engine rounds them), as many as their sum
    allows. The requests are sorted and summed once; each size is a bisection.

    >>> Batches([5, 3, 9, 3]).at(11)
    3
    >>> Batches([5]).at(4)
    0
    """

    def __init__(self, request_tokens: Sequence[int]) -> None:
        self.sums = list(itertools.accumulate(sorted(request_tokens)))

    def at(self, kv_tokens: int) -> int:
        """How many of the shortest requests fit ``kv_tokens`` together."""
        return bisect.bisect_right(self.sums, kv_tokens)


def mib_grid(lo_mb: int, hi_mb: int, points: int) -> list[int]:
    """``points`` whole-MiB settings spread evenly from ``lo_mb`` to ``hi_mb``, both included, each once.

    >>> mib_grid(0, 100, 5)
    [0, 25, 50, 75, 100]
    >>> mib_grid(3, 4, 5)
    [3, 4]
    """
    if hi_mb <= lo_mb or points < 2:
        return [lo_mb]
    return sorted({lo_mb + (hi_mb - lo_mb) * i // (points - 1) for i in range(points)})


def lattice_pairs(firsts: Sequence[int], widest: int, points: int) -> list[tuple[int, int]]:
    """Pairs ``(a, b)`` of whole-unit settings of two memories: each ``a`` of ``firsts`` with ``b`` = 0 and ``b``
    from above 0 to the first at or past ``widest``, so chosen that ``a + b`` falls on one lattice of about
    ``2 × points`` totals. The memory that takes the rest then has few distinct sizes (one per total and
    one per ``a``), and each of its sizes costs a replay.

    >>> lattice_pairs([8, 12], 6, 2)
    [(8, 0), (8, 4), (8, 8), (12, 0), (12, 4), (12, 8)]
    >>> sorted({a + b for a, b in lattice_pairs([8, 9, 11, 15], 20, 4)} - {8, 9, 11, 15})
    [12, 16, 20, 24, 28, 32, 36]
    """
    if not firsts:
        return []
    lo, hi = min(firsts), max(firsts)
    step = max(1, -(-(hi - lo + widest) // max(1, 2 * points - 1)))
    out: set[tuple[int, int]] = set()
    for a in firsts:
        out.add((a, 0))
        t = lo + (a - lo) // step * step + step  # the first total of the lattice above a
        while widest > 0 and t - a - step < widest:
            out.add((a, t - a))
            t += step
    return sorted(out)


def splits(
    budget_bytes: int,
    choices: Mapping[str, Sequence[int]],
    bytes_of: Callable[[str, int], int],
    extra: Sequence[Mapping[str, int]] = (),
) -> list[tuple[dict[str, int], int]]:
    """Every combination of ``choices`` (memory name -> its settings), then ``extra``, as ``fitting`` keeps them.

    >>> [left for _, left in splits(10, {"a": [0, 4, 8], "b": [0, 4]}, lambda name, v: v)]
    [10, 6, 6, 2, 2]
    """
    names = list(choices)
    combos = [dict(zip(names, c, strict=True)) for c in itertools.product(*(choices[n] for n in names))]
    return fitting(budget_bytes, [*combos, *extra], bytes_of)


def fitting(
    budget_bytes: int, combos: Sequence[Mapping[str, int]], bytes_of: Callable[[str, int], int]
) -> list[tuple[dict[str, int], int]]:
    """The combinations (memory name -> its setting) that fit ``budget_bytes``, each once, in order, with the
    bytes left to the memory that takes the rest. ``bytes_of(name, setting)`` is a setting's bytes per
    rank. At most ``MAX_CANDIDATES``: more is a ``ValueError`` (the grid is bounded before it is scored)."""
    out: list[tuple[dict[str, int], int]] = []
    seen: set[tuple[tuple[str, int], ...]] = set()
    for combo in combos:
        k = tuple(sorted(combo.items()))
        if k in seen:
            continue
        used = sum(bytes_of(n, v) for n, v in combo.items())
        if used > budget_bytes:
            continue
        seen.add(k)
        out.append((dict(combo), budget_bytes - used))
    if len(out) > MAX_CANDIDATES:
        raise ValueError(f"{len(out):,} candidate splits: at most {MAX_CANDIDATES:,}")
    return out
