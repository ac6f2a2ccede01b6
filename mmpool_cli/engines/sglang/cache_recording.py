"""SGLang's embedding and preprocess caches as ``mmpool record`` recorded them, replayed at other sizes.

The records say what the server's ``MultiModalStaticCache`` (or a tokenizer process's
``MultimodalPreprocessCache``) did at its own size
(``caches.recorded`` turns them into the scheduler's lookups); each point of the curve is an
exact replay of those lookups in the server's order (``caches.replay.replay``), the recorded size
among them, where the replay makes the hits that were recorded. A size is set in whole MiB
(``SGLANG_VLM_CACHE_SIZE_MB``; ``--mm-preprocess-cache-size-mb``, split evenly among the tokenizer
processes, one preprocess cache each in the recording), as for traffic (``caches.py``). Pure core:
standard library only.
"""

from __future__ import annotations

from fractions import Fraction

from mmpool_cli._record.mmpool_record import recfmt
from mmpool_cli.caches.curve import Curve
from mmpool_cli.caches.recorded import RecordedCache, recorded_lookups
from mmpool_cli.caches.replay import REPLAYED, bisect_setting, never_evicts, replay, replay_many
from mmpool_cli.caches.report import CacheNote, CacheReport, CacheResult, Recommendation, hits_needed
from mmpool_cli.core.units import MiB
from mmpool_cli.core.words import count
from mmpool_cli.engines.sglang import versions
from mmpool_cli.errors import MmpoolError
from mmpool_cli.traces.reader import MAX_EVENTS
from mmpool_cli.traces.record_stream import damage_of, read_caches

POINTS = 64  # the curve's points, each a replay


def recorded_caches(directory: str, target: Fraction, kv_cell_bytes: int | None) -> CacheReport:
    """Every embedding and preprocess cache the recording at ``directory`` holds, replayed at its size and others."""
    traces = read_caches(directory, MAX_EVENTS)
    if not traces:
        raise MmpoolError(
            f"{directory}: no cache-*.json: the recording holds no multimodal cache (a recording made before mmpool "
            "recorded SGLang's embedding cache, or a server that never made one)"
        )
    for t in traces:
        name = str(t.info.get(recfmt.K_CACHE, ""))
        if name.startswith("vllm_"):
            raise MmpoolError(f"{directory}: the recording holds vLLM's {name[5:]} cache: give --engine vllm")
    recorded = [recorded_lookups(t.info, t.events) for t in traces]
    results, notes = [], [CacheNote("record-damaged", "warning", str(d)) for d in damage_of(directory, traces)]
    workers = max(1, sum(rec.name == "preprocess" for rec in recorded))  # the tokenizer processes
    for rec in recorded:
        if rec.name not in ("embedding", "preprocess"):
            raise MmpoolError(
                f"cache {rec.where}: a {rec.name!r} cache; mmpool replays SGLang's embedding and preprocess caches"
            )
        result = _result(rec, target, kv_cell_bytes, 1 if rec.name == "embedding" else workers)
        results.append(result)
        replayed = result.hits
        if replayed != rec.hits:  # the replay's rules are not what the server did: say so, never hide it
            notes.append(
                CacheNote(
                    "cache-replay-differs",
                    "warning",
                    f"cache {rec.where}: the replay at the recorded {rec.size_bytes:,} B makes "
                    f"{count(replayed, 'hit')}; the server made {rec.hits:,}",
                )
            )
    return CacheReport(engine=f"SGLang {versions.NEWEST}", source=directory, caches=results, notes=notes)


def _result(rec: RecordedCache, target: Fraction, kv_cell_bytes: int | None, workers: int) -> CacheResult:
    """One cache's curve and setting; a preprocess cache's setting is for all ``workers`` (each gets
    its ``// workers`` share, as SGLang splits it)."""
    lk, size = rec.lookups, rec.size_bytes
    embedding = rec.name == "embedding"
    share = 1 if embedding else workers

    def per(mb: int) -> int:  # the bytes a setting gives this cache
        return mb * MiB // share

    top = never_evicts(lk) if not rec.unsized else size  # past the recorded size an unsized entry decides
    points = sorted({top * k // POINTS for k in range(POINTS + 1)} | {size})
    curve = _points(rec, points)
    need = hits_needed(curve, target)
    # a setting whose replay the records answer: the largest giving at most ``top`` where an entry is
    # unsized, else the smallest giving at least ``top``
    top_mb = ((top + 1) * share - 1) // MiB if rec.unsized else -(-top * share // MiB)
    rec_bytes: Recommendation | None = None
    if need > 0 and top_mb > 0 and replay(lk, per(top_mb))[0] >= need:
        mb = bisect_setting(lambda n: replay(lk, n)[0], need, per, top_mb)
        nbytes = per(mb)
        if embedding:
            cost = {"gpu_bytes_per_rank": nbytes}
            if kv_cell_bytes:
                cost["kv_tokens_per_rank"] = nbytes // kv_cell_bytes
            rec_bytes = Recommendation(nbytes, f"SGLANG_VLM_CACHE_SIZE_MB={mb}", cost)
        else:
            rec_bytes = Recommendation(
                nbytes,
                f"--mm-preprocess-cache-size-mb {mb}",
                {"host_bytes_per_tokenizer_process": nbytes, "host_bytes_all_processes": nbytes * workers},
            )
        if nbytes < top and nbytes not in points:  # the recommendation's own replay, shown with the rest
            curve = _points(rec, sorted({*points, nbytes}))
    notes = []
    if rec.unsized:
        notes.append(
            f"{rec.unsized:,} entries were larger than the recorded {size:,} B (never admitted, their bytes not "
            "recorded): the curve stops at the recorded size"
        )
    if rec.joined:
        notes.append(
            f"{rec.joined:,} of {rec.batches:,} batches hold a hit followed by another lookup with no store between: "
            "the records do not say where such a batch of hits ended, so it is read as one with the next; exact "
            "at the recorded size; at other sizes the hits may differ from what the server would make"
        )
    if embedding:
        title, origin, unit = "embedding cache (GPU, scheduler)", "SGLANG_VLM_CACHE_SIZE_MB", "embedding bytes"
    else:
        title, origin = "preprocess cache (host, tokenizer process)", "--mm-preprocess-cache-size-mb"
        unit, origin = "preprocessed bytes", f"{origin} // {workers} tokenizer process{'es' if workers > 1 else ''}"
    return CacheResult(
        name=rec.name,
        engine="sglang",
        title=f"{title} {rec.where}",
        size_bytes=size,
        size_origin=f"recorded: {size:,} B ({origin} as the server had it)",
        curve=curve,
        work_unit=unit,
        target=target,
        recommendation=rec_bytes,
        notes=notes,
        method=REPLAYED,
    )


def _points(rec: RecordedCache, points: list[int]) -> Curve:
    """The curve at ``points`` only, each an exact replay of the recorded lookups."""
    got = replay_many(rec.lookups, points)
    return Curve(len(rec.lookups.keys), tuple((p, *g) for p, g in zip(points, got, strict=True)))
