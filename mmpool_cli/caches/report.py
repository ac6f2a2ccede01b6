"""What one cache of an engine does with some traffic, at its deployment's size and at every size.

The neutral shape every engine's caches share (SGLang's "embedding" and "preprocess" caches,
vLLM's "processor" and "encoder" caches): an engine builds the lookups as it drives its cache,
``curve.lru_curve`` answers every size, and an engine's rules say the size the deployment
sets, how a size is set (whole MiB, split over processes) and what it costs. Neutral: knows no
engine; standard library only.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any, NamedTuple

from mmpool_cli.caches.curve import INF, Curve
from mmpool_cli.caches.replay import ONE_PASS
from mmpool_cli.core.findings import Note

DEFAULT_TARGET = Fraction(99)  # percent of an unbounded cache's hits


class CacheItem(NamedTuple):
    """One media item of one request, as the caches see it (from traffic, or from a trace's alloc). A
    tuple: a log's hundreds of thousands are made without a frozen dataclass's per-field ``__setattr__``."""

    request: str  # the request it came in (items of one request share it)
    kind: str  # "image", "video" (what the item's label starts with)
    key: str | None  # its content key (a digest of its data); None: unknown, taken as used once
    nbytes: int  # its pooled feature's bytes (the processor's output)
    label: str = ""


CacheNote = Note  # a finding of ``mmpool cache``


@dataclass(frozen=True)
class Recommendation:
    """The smallest settable size that reaches the target, how to set it, and what it costs."""

    size_bytes: int  # the cache's bytes at that setting
    setting: str  # what to copy, e.g. "SGLANG_VLM_CACHE_SIZE_MB=256"
    cost: dict[str, int]  # e.g. {"gpu_bytes": ..., "kv_tokens": ...} or {"host_bytes_per_process": ...}


@dataclass(frozen=True)
class CacheResult:
    """One cache: its identity, the size the deployment sets, and its curve over the traffic."""

    name: str  # "embedding", "preprocess" (SGLang); "processor", "encoder" (vLLM)
    engine: str  # the registry's name, e.g. "sglang"
    title: str  # how reports name it, e.g. "embedding cache (GPU, scheduler)"
    size_bytes: int  # what the deployment gives it (0: off)
    size_origin: str  # how that size was set
    curve: Curve
    work_unit: str  # what a hit saves, e.g. "encoder tokens"
    target: Fraction  # percent of the unbounded hits the recommendation reaches
    recommendation: Recommendation | None  # None where the traffic never hits
    lookups: int | None = None  # the lookups the engine counts at ``size_bytes`` (default: the curve's)
    notes: list[str] = field(default_factory=list)
    # how the curve was made: "one pass, exact" (a step function, exact at every size) or "replayed at
    # each point" (each point its own exact replay; the deployment's size is one of them)
    method: str = ONE_PASS
    # whether the deployment's size meets the cache's own goal, where that is not a share of the hits
    # (vLLM's encoder cache: no request waits); None: the hits' target decides
    meets: bool | None = None
    unit: str = "bytes"  # what its sizes count: "bytes", or "tokens" (vLLM's encoder cache: its JSON says size_tokens)
    extra: dict[str, Any] = field(default_factory=dict)  # the cache's own keys, after the shared ones

    @property
    def hits(self) -> int:
        return self.curve.at(self.size_bytes)[0] if self.size_bytes > 0 else 0

    @property
    def work_saved(self) -> int:
        return self.curve.at(self.size_bytes)[1] if self.size_bytes > 0 else 0

    def meets_target(self) -> bool:
        """Whether the hits at the deployment's size reach the target share of the unbounded hits (or,
        where ``meets`` is set, the cache's own goal)."""
        if self.meets is not None:
            return self.meets
        return self.hits >= hits_needed(self.curve, self.target)

    @property
    def counted_lookups(self) -> int:
        return self.curve.lookups if self.lookups is None else self.lookups

    def to_data(self) -> dict[str, Any]:
        """The cache as JSON-safe data: the shape every engine's caches share."""
        unbounded_hits, unbounded_work = self.curve.unbounded
        rec = self.recommendation
        data = {
            "name": self.name,
            "engine": self.engine,
            "size_bytes": self.size_bytes,
            "size_origin": self.size_origin,
            "lookups": self.counted_lookups,
            "hits": self.hits,
            "work_saved": self.work_saved,
            "work_unit": self.work_unit,
            "unbounded_hits": unbounded_hits,
            "unbounded_work_saved": unbounded_work,
            "unbounded_bytes": self.curve.steps[-1][0],
            "curve": [{"size_bytes": s, "hits": h, "work_saved": w} for s, h, w in self.curve.steps],
            "curve_method": self.method,
            "target_hits_percent": str(self.target),
            "recommended_bytes": None if rec is None else rec.size_bytes,
            "recommended_setting": None if rec is None else rec.setting,
            "recommended_cost": None if rec is None else dict(rec.cost),
            "notes": list(self.notes),
        }
        if self.unit == "tokens":  # never a count of tokens under a name that says bytes
            renamed = {"size_bytes": "size_tokens", "unbounded_bytes": "unbounded_tokens"}
            renamed["recommended_bytes"] = "recommended_tokens"
            data = {renamed.get(k, k): v for k, v in data.items()}
            data["curve"] = [{"size_tokens": s, "hits": h, "work_saved": w} for s, h, w in self.curve.steps]
            data["unit"] = "tokens"
        return data | self.extra


def hits_needed(curve: Curve, target: Fraction) -> int:
    """The hits ``target`` percent of an unbounded cache's make, rounded up."""
    need = Fraction(curve.unbounded[0]) * target / 100
    return -(-need.numerator // need.denominator)


def smallest_size(curve: Curve, target: Fraction) -> int | None:
    """The smallest size reaching ``target`` percent of the unbounded hits; None where nothing hits."""
    if curve.unbounded[0] == 0:
        return None
    size = curve.smallest_reaching(hits_needed(curve, target))
    return None if size >= INF else size


@dataclass(frozen=True)
class CacheReport:
    """Every cache of one engine over one traffic: what ``mmpool cache`` prints."""

    engine: str  # the engine's title, e.g. "SGLang 0.5.23"
    source: str  # what was read
    caches: list[CacheResult]
    notes: list[CacheNote] = field(default_factory=list)

    def to_data(self) -> dict[str, Any]:
        return {
            "engine": self.engine,
            "source": self.source,
            "caches": [c.to_data() for c in self.caches],
            "findings": [{"code": n.code, "severity": n.severity, "message": n.message} for n in self.notes],
        }
