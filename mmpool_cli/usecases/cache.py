"""``mmpool cache``: each multimodal cache of the engine over some traffic, at the deployment's size and
at every size. The items come from traffic (as ``trace`` reads it) or a trace file; the engine drives
its caches (``Engine.caches``). No typer, rich or torch.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from fractions import Fraction

from mmpool_cli.caches.report import CacheItem, CacheNote, CacheReport
from mmpool_cli.core.words import count
from mmpool_cli.engines import DEFAULT, engine
from mmpool_cli.errors import MmpoolError
from mmpool_cli.inputs.traffic.cache_request import CacheRequest, ModelShape, PrefixOptions
from mmpool_cli.inputs.traffic.prompts import Timed
from mmpool_cli.workload.families import Family


@dataclass(frozen=True)
class CacheQuery:
    """What ``mmpool cache`` was asked, its items already read."""

    family: Family
    settings: dict[str, object]
    items: list[CacheItem]
    source: str
    config_path: str | None  # the model's config.json, where --model named a directory
    kv_cell_bytes: int | None
    hidden_size: int | None  # --hidden-size
    environ: Mapping[str, str]
    preprocess_mb: int | None
    workers: int
    gpu_name: str | None
    target: Fraction
    prompts: Mapping[str, Timed] = field(default_factory=dict)  # each request's prompt and times, where read
    prefix: PrefixOptions = PrefixOptions()


def cache(q: CacheQuery, engine_name: str = DEFAULT) -> CacheReport:
    """The engine's caches over ``q``'s items.

    Raises:
        MmpoolError: nothing to replay, no item carrying its data, a --hidden-size the model directory
            contradicts, or what the engine's rules cannot size (exit 2).
    """
    return engine(engine_name).caches(cache_request(q))


def cache_request(q: CacheQuery) -> CacheRequest:
    """What ``q`` asks the engine's caches (``mmpool tune`` asks the same): its items checked, the model's shape.

    Raises:
        MmpoolError: as ``cache``.
    """
    from mmpool_cli.workload.embedding import embedding_shape

    if not q.items:
        raise MmpoolError(f"{q.source}: no media item to look up; nothing to replay")
    hidden, deep = (None, None) if q.config_path is None else embedding_shape(q.config_path)
    where = q.config_path or ""
    if q.hidden_size is not None and hidden is not None and q.hidden_size != hidden:
        raise MmpoolError(
            f"--hidden-size {q.hidden_size}: the model's {q.config_path} says {hidden:,}; drop --hidden-size (the "
            "model directory's own is used) or give --model a family name"
        )
    if q.hidden_size is not None:
        hidden, where = q.hidden_size, "--hidden-size"
    notes: list[CacheNote] = []
    unkeyed = sum(1 for item in q.items if item.key is None)
    if unkeyed == len(q.items):  # every size would show 0 hits: an answer about the input, not the caches
        raise MmpoolError(
            f"{q.source}: none of its {count(len(q.items), 'item')} carries its data, so no repeat can be seen (a "
            "request log at --log-requests-level 2 keeps only each string's ends; bench_serving's images are "
            "random); log with --log-requests-level 3 (every input whole), or give --from the OpenAI bodies or a "
            "trace mmpool trace wrote from them"
        )
    if unkeyed:
        notes.append(
            CacheNote(
                "cache-item-unkeyed",
                "warning",
                f"{unkeyed:,} of {count(len(q.items), 'item')} carry no content key (their data was not in the "
                "input: a log that cut them, bench_serving's random images, or a trace without keys): each taken as "
                "used once",
            )
        )
    if any(item.key is not None and item.key.startswith("url:") for item in q.items):
        notes.append(
            CacheNote("cache-url-key", "info", "http(s) URLs are never fetched: the same URL is taken as the same item")
        )
    return CacheRequest(
        family=q.family,
        settings=dict(q.settings),
        items=q.items,
        source=q.source,
        shape=ModelShape(hidden, deep, kv_cell_bytes=q.kv_cell_bytes, where=where),
        environ=q.environ,
        preprocess_mb=q.preprocess_mb,
        workers=q.workers,
        gpu_name=q.gpu_name,
        target=q.target,
        notes=notes,
        prompts=q.prompts,
        prefix=q.prefix,
    )


def recorded(
    directory: str, target: Fraction, kv_cell_bytes: int | None, engine_name: str = DEFAULT, window: int = 1
) -> CacheReport:
    """The caches a recording of ``mmpool record`` holds, replayed at their recorded size and others.

    Raises:
        MmpoolError: a recording without caches, or records the replay cannot follow (exit 2).
    """
    return engine(engine_name).recorded_caches(directory, target, kv_cell_bytes, window)
