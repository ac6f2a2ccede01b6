"""The Pareto front of ``mmpool tune``'s rows and the objectives that choose one row of it.

A row is on the front when no other row is at least as good on every measure (fewer features
falling back, less prefill and encoder work, more KV tokens) and better on one. Each objective is a
lexicographic key over all three measures, so the row it chooses is always on the front. Neutral:
knows no engine.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from fractions import Fraction

from mmpool_cli.tune.split import Measures, Row

DEFAULT_OBJECTIVE = "no-fallback"
# name -> what it chooses (docs/tune.md); every key ends with the measures it does not lead with
OBJECTIVES = {
    "no-fallback": "no feature falls back (else the fewest), then the least prefill + encoder work per request, "
    "then the most KV tokens",
    "least-work": "the least prefill + encoder work per request, then the fewest fallbacks, then the most KV tokens",
    "most-kv": "the most KV tokens (the largest batch), then the fewest fallbacks, then the least work",
}


def key(m: Measures, objective: str) -> tuple[int | Fraction, ...]:
    """The objective's ordering of a row's measures: the smaller, the better."""
    if objective == "no-fallback":
        return (m.fallback_items, m.work_per_request, -m.kv_tokens, m.fallback_bytes)
    if objective == "least-work":
        return (m.work_per_request, m.fallback_items, -m.kv_tokens, m.fallback_bytes)
    if objective == "most-kv":
        return (-m.kv_tokens, m.fallback_items, m.work_per_request, m.fallback_bytes)
    raise ValueError(f"objective {objective!r}: one of {', '.join(OBJECTIVES)}")


def _measures(m: Measures) -> tuple[int, int, int, int]:
    return (m.fallback_items, m.fallback_bytes, m.work, -m.kv_tokens)  # each: the smaller, the better


def dominates(a: Measures, b: Measures) -> bool:
    """Whether ``a`` is at least as good as ``b`` on every measure and better on one."""
    x, y = _measures(a), _measures(b)
    return x != y and all(p <= q for p, q in zip(x, y, strict=True))


def front(rows: Sequence[Row]) -> list[bool]:
    """For each row, whether it is on the Pareto front (no other row dominates it)."""
    ms = [r.measures for r in rows]
    # sorted by the measures, a dominating row comes before the rows it dominates
    order = sorted(range(len(ms)), key=lambda i: _measures(ms[i]))
    kept: list[int] = []
    on = [False] * len(ms)
    for i in order:
        if not any(dominates(ms[j], ms[i]) for j in kept):
            kept.append(i)
            on[i] = True
    return on


def recommend(rows: Sequence[Row], objective: str = DEFAULT_OBJECTIVE) -> int:
    """The index of the row the objective chooses (the first of equals); always a row on the front."""
    if not rows:
        raise ValueError("no rows to choose from")
    return min(range(len(rows)), key=lambda i: key(rows[i].measures, objective))


def mark(
    rows: Sequence[Row], objective: str = DEFAULT_OBJECTIVE, eligible: Sequence[bool] | None = None
) -> tuple[tuple[Row, ...], str]:
    """``rows`` with their place on the front and the recommendation marked, and the report's status:
    ``ok`` where today's row (if any) is as good as the recommended one under the objective, else ``fail``.
    A row not ``eligible`` (today's launch, where it takes more than the budget divided) is neither on the
    front nor recommended, and beats no row; its status is still weighed."""
    ok_rows = [i for i in range(len(rows)) if eligible is None or eligible[i]]
    if not ok_rows:
        raise ValueError("no eligible row to choose from")
    chosen = [rows[i] for i in ok_rows]
    on_chosen = front(chosen)
    on = [False] * len(rows)
    for j, i in enumerate(ok_rows):
        on[i] = on_chosen[j]
    best = ok_rows[recommend(chosen, objective)]
    marked = tuple(dataclasses.replace(r, on_front=on[i], recommended=i == best) for i, r in enumerate(rows))
    today = next((r for r in rows if r.today), None)
    ok = today is None or key(today.measures, objective) <= key(rows[best].measures, objective)
    return marked, "ok" if ok else "fail"
