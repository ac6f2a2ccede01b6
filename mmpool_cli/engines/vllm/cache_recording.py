"""vLLM's processor and encoder caches as ``mmpool record`` recorded them; the processor cache replayed at other sizes.

The records (``mmpool_record.caches_vllm``) are what each API process's sender did at its own size,
in the order vLLM called it: where a request's items begin (``is_cached``), a lookup per item (a hit or
a miss, vLLM's own counters), the entry stored and what it evicted. A request is the lookups after a
run of ``is_cached`` calls (one per modality), as many as their hashes; a lookup past them (vLLM's
``input_processor`` storing items processed outside it) is a request of its own. An entry's bytes are
those its hit or its insertion recorded. Each API process has its own cache of the size set, so the
curve at a size is the sum of every sender's replay at it (``processor_replay``, vLLM's rules of the
recorded release); the recorded size is one of its points, where the replay makes the hits vLLM
counted, and a report says so where it does not. An entry never stored (larger than the cache, or a
ring full of items it may not free) has no bytes on record: the curve then stops at the recorded size.

The encoder cache's records are summed (lookups, hits, items that waited for room, the peak it held);
its admissions at another budget follow the scheduler, which the recording does not hold at that
budget: the report says to replay the traffic for them. Pure core: standard library only.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

from mmpool_cli._record.mmpool_record import recfmt
from mmpool_cli.caches.curve import Curve
from mmpool_cli.caches.replay import REPLAYED
from mmpool_cli.caches.report import CacheNote, CacheReport, CacheResult, Recommendation, hits_needed
from mmpool_cli.core.words import count
from mmpool_cli.engines.vllm import encoder_replay, processor_cache, processor_replay, versions
from mmpool_cli.engines.vllm.caches import smallest_reaching
from mmpool_cli.engines.vllm.gib import bytes_of
from mmpool_cli.engines.vllm.plan import _gib_for
from mmpool_cli.engines.vllm.processor_cache import DataParallel
from mmpool_cli.errors import MmpoolError
from mmpool_cli.traces.reader import MAX_EVENTS
from mmpool_cli.traces.record_stream import CacheTrace, damage_of, read_caches

POINTS = 64  # the curve's points, each a replay
NAMES = ("vllm_processor", "vllm_encoder")


@dataclass
class RecordedSender:
    """One API process's processor cache: its requests (items' keys), entries' bytes and vLLM's counts."""

    where: str
    cache_type: processor_replay.Layout
    size_bytes: int
    max_object: int
    release: str
    requests: list[list[str]] = field(default_factory=list)
    times: list[int] = field(default_factory=list)  # each request's first record (ns, the host's monotonic clock)
    sizes: dict[str, int] = field(default_factory=dict)
    unsized: set[str] = field(default_factory=set)
    hits: int = 0
    lookups: int = 0
    clears: int = 0  # clear_cache calls (vLLM's reset of the caches): the replay goes on from a full cache


def _where(info: dict[str, Any]) -> str:
    return f"{info.get(recfmt.K_PID)}-{info.get(recfmt.K_POOL)}"


def _release(info: dict[str, Any]) -> str:
    """The release whose rules the replay applies: the server's vLLM where its code is that release's (its
    processor drives the cache too, and changed where the cache's code did not), else the newest release
    the recorded code matched.

    >>> _release({"code_of": ["0.33.0", "0.34.0"], "vllm": "0.33.0"}), _release({"code_of": ["0.33.0", "0.34.0"]})
    ('0.33.0', '0.34.0')
    """
    code_of = [str(v) for v in info.get(recfmt.K_CODE_OF) or [] if str(v) in versions.known()]
    installed = str(info.get(recfmt.K_VLLM) or "")
    if installed in code_of:
        return installed
    return max(code_of, key=processor_replay.version_key) if code_of else versions.NEWEST


def sender(trace: CacheTrace) -> RecordedSender:
    """One recorded sender as the requests ``processor_replay`` drives.

    >>> from mmpool_cli._record.mmpool_record import recfmt as r
    >>> t = CacheTrace({r.K_CACHE_BYTES: 10, r.K_CACHE_TYPE: "lru", r.K_PID: 1, r.K_POOL: 0})
    >>> t.events += [(0, r.CACHE_REQUEST, 2, 0, 0), (1, r.CACHE_LOOKUP, 5, 0, 0), (2, r.CACHE_INSERT, 5, 4, 4),
    ...              (3, r.CACHE_LOOKUP, 5, 1, 4), (4, r.CACHE_LOOKUP, 6, 0, 0)]
    >>> s = sender(t); s.requests, s.sizes, s.hits, s.lookups
    ([['5', '5'], ['6']], {'5': 4}, 1, 3)
    """
    info = trace.info
    try:
        kind = str(info.get(recfmt.K_CACHE_TYPE))
        if kind not in ("processor_only", "lru", "shm"):
            raise ValueError(kind)
        rec = RecordedSender(
            _where(info),
            kind,  # type: ignore[arg-type]
            int(info[recfmt.K_CACHE_BYTES]),
            int(info.get(recfmt.K_MAX_OBJECT) or 128 << 20),
            _release(info),
        )
    except (KeyError, TypeError, ValueError):
        raise MmpoolError(f"cache {_where(info)}: not a manifest of vLLM's processor cache") from None
    expected = 0  # the items the current request's is_cached calls announced, not yet looked up
    announcing = False
    current: list[str] | None = None
    for t, kind_, a, b, c in trace.events:
        if kind_ == recfmt.CACHE_REQUEST:
            if not announcing:
                current, expected = [], 0
                rec.requests.append(current)
                rec.times.append(t)
            expected += a
            announcing = True
        elif kind_ == recfmt.CACHE_LOOKUP:
            announcing = False
            key = str(a)
            if current is None or expected <= 0:
                current, expected = [], 1
                rec.requests.append(current)
                rec.times.append(t)
            current.append(key)
            expected -= 1
            rec.lookups += 1
            if b:
                rec.hits += 1
                if c > 0:
                    rec.sizes[key] = c
        elif kind_ == recfmt.CACHE_INSERT:
            if b > 0:
                rec.sizes[str(a)] = b
            elif b < 0:
                rec.unsized.add(str(a))
        elif kind_ == recfmt.CACHE_FREE and a == 0:
            rec.clears += 1
    kept = [(t, r) for t, r in zip(rec.times, rec.requests, strict=True) if r]
    rec.times, rec.requests = [t for t, _ in kept], [r for _, r in kept]
    rec.unsized -= rec.sizes.keys()
    return rec


def _replay(senders: list[RecordedSender], size: int) -> tuple[int, int]:
    """(hits, processed bytes saved) of every sender at ``size`` bytes each."""
    hits = saved = 0
    if size <= 0:  # no cache (vLLM's 0 GiB turns it off)
        return hits, saved
    for s in senders:
        # an item never stored is larger than any size the curve asks at (it stops at the recorded size)
        sizes = dict.fromkeys(s.unsized, max(s.size_bytes, s.max_object) + 1) | s.sizes
        r = processor_replay.replay(
            s.requests, sizes, size, s.cache_type, max_object=s.max_object, release=s.release, work=sizes
        )
        hits, saved = hits + r.total_hits, saved + r.saved
    return hits, saved


def _host_bytes(kind: str, cache_bytes: int, processes: int) -> int:
    """The host RAM a launch with ``cache_bytes`` per cache takes, laid out as recorded."""
    dp = (
        DataParallel(size=max(2, processes), api_server_count=processes) if kind == "processor_only" else DataParallel()
    )
    return processor_cache.plan(cache_bytes, "shm" if kind == "shm" else "lru", dp).host_bytes


def _processor(senders: list[RecordedSender], target: Fraction) -> tuple[CacheResult, list[CacheNote]]:
    first = senders[0]
    size = first.size_bytes
    unsized = sum(len(s.unsized) for s in senders)
    everything = sum(sum(s.sizes.values()) for s in senders) * (2 if first.cache_type == "shm" else 1)
    top = size if unsized else max(everything, size)
    points = sorted({top * k // POINTS for k in range(POINTS + 1)} | {size})
    seen: dict[int, tuple[int, int]] = {}

    def run(c: int) -> tuple[int, int]:
        if c not in seen:
            seen[c] = _replay(senders, c)
        return seen[c]

    curve = Curve(sum(s.lookups for s in senders), tuple((p, *run(p)) for p in points))
    need = hits_needed(curve, target)
    recommendation = None
    if need > 0:
        # the setting has 4 digits of GiB: the search stops where both ends give the same one
        smallest = smallest_reaching(lambda c: run(c)[0], points, need, lambda lo, hi: _gib_for(lo) == _gib_for(hi))
        text = _gib_for(smallest)
        setting = bytes_of(float(text))
        if run(setting)[0] >= need:
            cost = {"hits": run(setting)[0], "host_bytes": _host_bytes(first.cache_type, setting, len(senders))}
            recommendation = Recommendation(setting, f"--mm-processor-cache-gb {text}", cost)
            if setting not in points and setting <= top:
                points = sorted({*points, setting})
                curve = Curve(curve.lookups, tuple((p, *run(p)) for p in points))
    notes = [
        f"replayed with vLLM {first.release}'s rules ({first.cache_type}); each API process has its own cache of the "
        f"size set: the curve is the sum of {len(senders)} sender(s) replayed at each size",
    ]
    clears = sum(s.clears for s in senders)
    if clears:
        notes.append(
            f"the server cleared the cache {clears:,} time(s) (vLLM's cache reset); the replay does not: after "
            "a clear its hits may differ from the server's"
        )
    if unsized:
        notes.append(
            f"{unsized:,} item(s) were never stored at the recorded {size:,} B (their bytes are not on record): "
            "the curve stops at the recorded size"
        )
    result = CacheResult(
        name="processor",
        engine="vllm",
        title=f"processor cache (host RAM, {first.cache_type}) {', '.join(s.where for s in senders)}",
        size_bytes=size,
        size_origin=f"recorded: {size:,} B per API process (--mm-processor-cache-gb as the server had it)",
        curve=curve,
        work_unit="processed bytes",
        target=target,
        recommendation=recommendation,
        lookups=curve.lookups,
        notes=notes,
        method=REPLAYED,
    )
    found = []
    recorded = sum(s.hits for s in senders)
    if result.hits != recorded:  # the replay's rules are not what vLLM did: say so, never hide it
        found.append(
            CacheNote(
                "cache-replay-differs",
                "warning",
                f"vLLM's processor cache: the replay at the recorded {size:,} B makes {count(result.hits, 'hit')}; "
                f"vLLM counted {recorded:,}",
            )
        )
    return result, found


def _encoder(trace: CacheTrace) -> list[CacheNote]:
    """The encoder cache's recorded figures, as notes."""
    lookups = hits = waits = evicted = peak = 0
    for _, kind, a, b, c in trace.events:
        if kind == recfmt.CACHE_LOOKUP:
            lookups, hits = lookups + 1, hits + (b > 0)
        elif kind == recfmt.CACHE_WAIT:
            waits += 1
        elif kind == recfmt.CACHE_EVICT:
            evicted += a
        elif kind == recfmt.CACHE_INSERT:
            peak = max(peak, c)
    budget = int(trace.info.get(recfmt.K_CACHE_BYTES) or 0)
    where = _where(trace.info)
    notes = [
        CacheNote(
            "encoder-cache-recorded",
            "info",
            f"vLLM's encoder cache {where}: a budget of {budget:,} tokens; {count(lookups, 'lookup')}, {hits:,} found "
            f"cached; entries evicted: {evicted:,}; at most {peak:,} tokens held. Its admissions at another budget "
            "follow the scheduler, which the recording holds at this one only: for a curve, replay the traffic "
            "(mmpool cache --engine vllm --from LOG or --trace TRACE)",
        )
    ]
    if waits:
        notes.append(
            CacheNote(
                "encoder-cache-waits",
                "warning",
                f"vLLM's encoder cache {where}: {waits:,} time(s) an item waited for room at {budget:,} tokens "
                "(raise --max-num-batched-tokens)",
            )
        )
    return notes


def _encoder_result(trace: CacheTrace, senders: list[RecordedSender], window: int) -> tuple[CacheResult, list[str]]:
    """The encoder cache replayed at other budgets over the requests the processor caches saw (in the order
    they reached them), each item's tokens as the encoder cache recorded them; None-free: the caller
    checks there are requests."""
    budget = int(trace.info.get(recfmt.K_CACHE_BYTES) or 0)
    tokens: dict[str, int] = {}
    recorded_hits = 0
    for _, kind, a, b, c in trace.events:
        if kind == recfmt.CACHE_INSERT and b > 0:
            tokens[str(a)] = b
        elif kind == recfmt.CACHE_LOOKUP and b:
            recorded_hits += 1
            if c > 0:
                tokens[str(a)] = c
        elif kind == recfmt.CACHE_WAIT:  # an item it had no room for: its tokens, even if never held
            tokens.setdefault(str(a), b)
    timed = sorted((t, n, keys) for n, s in enumerate(senders) for t, keys in zip(s.times, s.requests, strict=True))
    requests, dropped = [], 0
    for _, _, keys in timed:
        known = [k for k in keys if k in tokens]
        dropped += len(keys) - len(known)
        if known:
            requests.append(known)
    seen: dict[int, encoder_replay.EncoderReplay] = {}

    def run(size: int) -> encoder_replay.EncoderReplay:
        if size not in seen:
            seen[size] = encoder_replay.replay(requests, tokens, size, window)
        return seen[size]

    used = {k for keys in requests for k in keys}
    total = sum(tokens[k] for k in used)
    smallest = encoder_replay.no_wait_budget(requests, tokens, window)
    least = min(tokens[k] for k in used)
    points = sorted({least + (total - least) * k // (POINTS // 2) for k in range(POINTS // 2 + 1)} | {0})
    points = sorted({*points, budget, smallest})
    curve = Curve(
        sum(len(keys) for keys in requests),
        tuple((p, run(p).hits, run(p).saved) if p > 0 else (0, 0, 0) for p in points),
    )
    at = run(budget) if budget > 0 else None
    notes = [
        f"replayed over the {count(len(requests), 'request')} the processor caches recorded, in the order they reached "
        f"them; assumed: {encoder_replay.ASSUMED.format(window=window)} (--encoder-window)",
        f"recommended: the smallest budget where no request waits for space ({smallest:,} tokens)",
    ]
    if dropped:
        notes.append(f"{count(dropped, 'item')} the encoder cache never saw (their tokens are not on record): left out")
    if at is not None:
        notes.append(
            f"at the recorded {budget:,} tokens the replay has {count(len(at.waited), 'request')} waiting, "
            f"{len(at.refused):,} refused (an item larger than the budget) and {count(at.hits, 'hit')}; the "
            f"scheduler's own order (its chunked prefills and their steps) made {count(recorded_hits, 'lookup')} "
            "hit: they differ where its order is not the replay's"
        )
    origin = "max(--max-num-batched-tokens, the largest item)"
    result = CacheResult(
        name="encoder",
        engine="vllm",
        title=f"encoder cache (tokens, engine core) {_where(trace.info)}",
        size_bytes=budget,
        size_origin=f"recorded: {budget:,} tokens ({origin} as the server had it)",
        curve=curve,
        work_unit="encoder tokens",
        target=Fraction(100),
        recommendation=Recommendation(
            smallest, f"--max-num-batched-tokens {smallest}", {"encoder_tokens_per_worker": smallest}
        ),
        notes=notes,
        method=REPLAYED,
        unit="tokens",
        meets=at is not None and not at.waited and not at.refused,
    )
    return result, notes


def recorded_caches(directory: str, target: Fraction, window: int = 1) -> CacheReport:
    """vLLM's processor caches (replayed at their size and others) and encoder caches (their figures) in the
    recording at ``directory``.

    Raises:
        MmpoolError: a recording without vLLM's caches, or with SGLang's.
    """
    traces = read_caches(directory, MAX_EVENTS)
    ours = [t for t in traces if t.info.get(recfmt.K_CACHE) in NAMES]
    if len(ours) != len(traces):
        raise MmpoolError(f"{directory}: the recording holds SGLang's caches: give --engine sglang")
    if not ours:
        raise MmpoolError(
            f"{directory}: no cache-*.json: the recording holds no multimodal cache of vLLM (a recording made before "
            "mmpool recorded vLLM's caches, or a server whose caches are off)"
        )
    senders = [sender(t) for t in ours if t.info.get(recfmt.K_CACHE) == "vllm_processor"]
    caches, notes = [], [CacheNote("record-damaged", "warning", str(d)) for d in damage_of(directory, ours)]
    if senders:
        kinds = {(s.cache_type, s.size_bytes) for s in senders}
        if len(kinds) > 1:
            raise MmpoolError(f"{directory}: processor caches of different types or sizes: {sorted(kinds)}")
        senders = [s for s in senders if s.lookups]
        if senders:
            result, found = _processor(senders, target)
            caches.append(result)
            notes += found
    for t in ours:
        if t.info.get(recfmt.K_CACHE) == "vllm_encoder":
            notes += _encoder(t)
            if senders and any(k == recfmt.CACHE_INSERT for _, k, _, _, _ in t.events):
                caches.append(_encoder_result(t, senders, window)[0])
    return CacheReport(engine=f"vLLM {_release(ours[0].info)}", source=directory, caches=caches, notes=notes)
