"""``mmpool tune --engine vllm``: vLLM 0.34.0's GPU memories divided over one budget, scored from the traffic.

The memories (files and lines of vLLM 0.34.0), each taken out of what the KV cache would otherwise get:

* **KV blocks** (``kv``, ``--num-gpu-blocks-override``, whole blocks). With the override vLLM allocates
  exactly that many blocks, whatever its memory profile left (``may_override_num_blocks``,
  ``v1/core/kv_cache_planning.py:288-294``; ``:1612-1632``: the KV memory becomes override × bytes per
  block, held to nothing else), so the split is what keeps the sum within the GPU. A block is
  ``block_size`` tokens of every layer's K and V: ``layers × max(1, kv_heads // tp) × (head_dim +
  v_head_dim) × dtype`` bytes a token (``v1/kv_cache_interface.py:597-612``, summed over the layers by
  ``kv_cache_planning.py:620-648``; ``plan.kv_bytes_per_token``, from a model directory). One block is the
  null block, never lent (``v1/core/block_pool.py:162-165``): ``(N - 1) × block_size`` tokens hold requests. The
  prefix cache lives in these blocks (chained block hashes, ``caches/blocks.py``), replayed at each
  candidate's N as ``mmpool cache --engine vllm``'s curve replays each point (``caches.prefix.BlockReplays``).
* **Encoder cache** (``encoder``, tokens, set by ``--max-num-batched-tokens``): its budget is
  ``max(encoder_cache_size, the largest item the launch allows)`` with ``encoder_cache_size =
  max_num_batched_tokens`` (``config/scheduler.py:350-351``, ``compute_mm_encoder_budget`` in
  ``v1/core/encoder_cache_manager.py:329-376``): no setting goes below that floor, and the flag must stay
  at least ``--max-num-seqs`` (``config/scheduler.py:375-380``). The manager lets the cache hold up to the
  budget's tokens of embeddings on every GPU worker; vLLM takes them out of the KV cache through its memory
  profile, which encodes ``budget // largest`` items of the largest size and keeps them in the encoder cache
  while the decoder's dummy batch runs (``multimodal/encoder_budget.py:142-217``,
  ``v1/worker/gpu/mm/encoder_runner.py:111-147``, ``v1/worker/gpu/model_runner.py:1070-1104``, measured
  by ``determine_available_memory``, ``v1/worker/gpu_worker.py:673-780``). mmpool counts the budget's
  bytes, tokens × the embedding's bytes a token (``plan --engine vllm``'s budget bytes): what the cache
  may hold. The cache is replayed behind the prefix cache of each candidate's KV blocks (the items outside
  each cached prefix, ``v1/core/sched/scheduler.py`` ``_try_schedule_encoder_inputs``) by
  ``encoder_replay.replay``, what ``mmpool cache --engine vllm`` runs at the launch's budget.
* **GPU decode pool** (``decode_pool``, bytes, ``--mm-ipc-gpu-memory-gb``): every GPU worker takes the
  whole ``int(gb × 2**30)`` out of its KV memory (``reserve_mm_ipc_gpu_memory``,
  ``multimodal/gpu_ipc_memory.py:155-267``, called at ``v1/worker/gpu_worker.py:709-713, 837-841``);
  each API process gets ``// API processes`` of it (``gpu_ipc_memory.py:127-152``) and a decode larger
  than its share fails the request (``gpu_ipc_memory.py:80-93``): the PyNvVideoCodec decoder asks for
  sampled frames × H × W × 3 bytes (``multimodal/video_decoders/pynvvideocodec.py:601-617``; with no pool,
  budget 0, it decodes ungated, in GPU memory no split reserves). Under ``--num-gpu-blocks-override`` the
  reservation no longer lowers the block count (the override replaces the memory it was taken from), so the
  split itself keeps the pool within the budget. The pool decides something only where
  the traffic has videos and the launch decodes them on the GPU; elsewhere the answer says so and every
  candidate gives it 0. The GPU backend's decoder surfaces and CUDA contexts are taken at every setting
  (``gpu_pool.kv_reserved``): not part of the split.
* **Processor cache** (``--mm-processor-cache-gb``): host RAM, not GPU memory: reported at the launch's
  setting, not divided.

``--max-num-batched-tokens`` also sets the scheduler's step and the decoder's profile batch, whose
activations mmpool does not measure: said once in the answer. Pure core: standard library only.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from fractions import Fraction

from mmpool_cli.engines.vllm import encoder_replay, gpu_pool
from mmpool_cli.engines.vllm import prefix as vllm_prefix
from mmpool_cli.engines.vllm.caches import grid
from mmpool_cli.engines.vllm.tune_score import ENCODER, KV, MAX_BLOCKS, MEMORIES, POOL, MiB, Scorer, VllmTuneInput
from mmpool_cli.errors import MmpoolError
from mmpool_cli.tune.front import key, mark
from mmpool_cli.tune.split import Row, TuneNote, TuneReport, splits
from mmpool_cli.workload.items import Video

__all__ = ["Scorer", "VllmTuneInput", "measure_videos", "tune", "tune_at", "unsized_videos"]

UNKNOWN_BUDGET = (
    "the memory to divide is not known: give --num-gpu-blocks-override N (the KV blocks vLLM logs at start-up, so "
    "that today's launch gives it) or --budget SIZE"
)


def measure_videos(refs: Sequence[tuple[str, str | None, str]]) -> tuple[tuple[Video, ...], tuple[str, ...]]:
    """The traffic's videos (reference, the end of a cut string, where) as the decode pool sizes them: each
    container's frames and frame size; why each other one is not (vLLM loads data:, file: and http(s) URLs
    only, ``multimodal/media/connector.py:381-427``; mmpool fetches no URL)."""
    from mmpool_cli.inputs.traffic.video_refs import MeasuredVideo, VideoReader

    reader = VideoReader()
    videos: list[Video] = []
    unsized: list[str] = []
    for ref, tail, where in refs:
        if ref[:5].lower() != "data:" and not ref.lower().startswith(("file:", "http://", "https://")):
            unsized.append(f"{where}: vLLM refuses the video: 'The URL must be either a HTTP, data or file URL.'")
            continue
        if ref.lower().startswith(("http://", "https://")):
            unsized.append(f"{where}: an http(s) video cannot be measured offline (mmpool never fetches one)")
            continue
        got = reader.measure(ref, tail)
        if not isinstance(got, MeasuredVideo) or got.info is None:
            unsized.append(f"{where}: {getattr(got, 'reason', 'not measured')}")
            continue
        info = got.info
        fps = Fraction(info.average_fps)
        videos.append(Video(info.width, info.height, Fraction(info.frames) / fps, fps, count=info.frames))
    return tuple(videos), tuple(unsized)


def tune_at(inp: VllmTuneInput, values: Mapping[str, int] | None = None) -> Row:
    """The row of one split (None: the launch's own), computed by the code that scores ``tune``'s rows."""
    scorer = Scorer(inp)
    return scorer.row(values or {}, today=values is None)


def unsized_videos(inp: VllmTuneInput) -> list[str]:
    """Why each video of the traffic the decode pool does not count was left out (``tune``'s
    ``vllm-tune-video-unsized`` warnings): the loader's refusals, then the videos not measured."""
    return [*Scorer.decodes_of(inp.request, inp.videos)[1], *inp.unsized]


def tune(
    inp: VllmTuneInput,
    *,
    budget_bytes: int | None = None,
    budget_text: str | None = None,
    objective: str = "no-fallback",
    points: int = 8,
    source: str = "",
) -> TuneReport:
    """Every split of the budget vLLM accepts (whole blocks, encoder budgets from its floor, whole-MiB decode
    pools) scored from one replay per memory and KV size, the front and the objective's recommendation.

    Raises:
        MmpoolError: no budget can be found (no KV blocks given and no --budget), the model's KV shape or
            encoder tokens are unknown, a launch ``cache`` refuses, or a budget too small for any split.
    """
    s = Scorer(inp)
    today = s.today()
    if budget_bytes is None:
        if today is None:
            raise MmpoolError(UNKNOWN_BUDGET)
        budget_bytes = sum(s.bytes_of(n, today[n]) for n in (KV, ENCODER, POOL))
        origin = (
            f"today's launch: {today[KV]:,} KV blocks × {s.block_bytes:,} B + the encoder cache's "
            f"{today[ENCODER]:,} tokens × {s.per_token:,} B + the decode pool's {today[POOL]:,} B"
        )
    else:
        origin = f"--budget {budget_text}" if budget_text else f"--budget {budget_bytes:,} B"
    notes: list[TuneNote] = []
    enc_values, enc_why = encoder_choices(s, points)
    pool_values, pool_why = pool_choices(s, points)
    for why in (enc_why, pool_why):
        if why is not None:
            notes.append(TuneNote("vllm-tune-fixed", "info", why))
    if s.pool_decides and 0 not in pool_values:
        notes.append(
            TuneNote(
                "vllm-tune-fixed",
                "info",
                "no candidate turns the decode pool off: at 0 vLLM decodes the videos ungated, in GPU memory "
                "no split reserves (video_decoders/pynvvideocodec.py:601-617); a launch without it is shown, "
                "never recommended",
            )
        )
    if inp.request.gpu_video_backend:
        decoders = gpu_pool.kv_reserved(0, s.api, gpu_video_backend=True)
        notes.append(
            TuneNote(
                "vllm-tune-fixed",
                "info",
                f"the GPU video backend's decoder surfaces and CUDA contexts take {decoders:,} B of every worker's KV "
                f"memory ({s.api} API process(es)) at every setting (gpu_ipc_memory.py:224-239): outside the split",
            )
        )
    extra = [] if today is None else [{ENCODER: today[ENCODER], POOL: today[POOL]}]
    combos = splits(budget_bytes, {ENCODER: enc_values, POOL: pool_values}, s.bytes_of, extra)
    if s.pool_decides:  # a launch without the pool decodes ungated: today's own row only, never a candidate
        combos = [(c, left) for c, left in combos if c[POOL]]
    s.prepare([min(left // s.block_bytes, MAX_BLOCKS) for _combo, left in combos])
    rows: list[Row] = []
    for combo, left in combos:
        blocks = min(left // s.block_bytes, MAX_BLOCKS)
        if blocks < 2:
            continue
        values = {KV: blocks, **combo}
        rows.append(s.row(values, today=values == today))
    if not rows:
        raise MmpoolError(
            f"{origin}: {budget_bytes:,} B leave no split two KV blocks ({s.block_bytes:,} B each) beside the "
            f"encoder cache's floor ({s.floor:,} tokens × {s.per_token:,} B)"
        )
    outside: list[Row] = []
    if today is not None and not any(r.today for r in rows):
        # today's launch is no split of this budget (its blocks are not what the budget leaves, or it decodes
        # ungated): shown beside the candidates, held to the recommendation, never recommended itself
        outside.append(s.row(today, today=True))
    marked, status = mark(rows, objective)
    if outside:
        best = next(r for r in marked if r.recommended)
        status = "ok" if key(outside[0].measures, objective) <= key(best.measures, objective) else "fail"
    if today is None:
        notes.append(
            TuneNote(
                "vllm-tune-no-today",
                "info",
                "today's KV blocks are not given (--num-gpu-blocks-override): no row of today's launch to compare",
            )
        )
    notes.extend(_prefix_notes(s))
    if today is not None:  # the server's cached_tokens held to the replay at today's KV blocks, as cache does
        found = vllm_prefix.server_findings(s.built, inp.traffic.prompts, inp.flags, s.behind(today[KV]).served)
        notes.extend(TuneNote(code, severity, message) for code, severity, message in found)
    for e in s.decode_errors:
        notes.append(TuneNote("vllm-tune-video-unsized", "warning", e))
    for why in inp.unsized:
        notes.append(TuneNote("vllm-tune-video-unsized", "warning", why))
    pc = s.plan.processor_cache
    notes.append(
        TuneNote(
            "vllm-tune-host-cache",
            "info",
            f"the processor cache is host RAM, not divided: {pc.layout}, {pc.cache_bytes:,} B a cache, up to "
            f"{pc.host_bytes:,} B of host RAM at today's --mm-processor-cache-gb (its hits: mmpool cache "
            "--engine vllm)",
        )
    )
    release = inp.request.release.version
    return TuneReport(
        engine=f"vLLM {release}",
        version=release,
        source=source or ", ".join(inp.traffic.files),
        budget_bytes=budget_bytes,
        budget_origin=origin,
        memories=MEMORIES,
        rows=(*marked, *outside),
        objective=objective,
        assumptions=tuple(s.assumptions),
        notes=tuple(notes),
        status=status,
    )


def encoder_choices(s: Scorer, points: int) -> tuple[list[int], str | None]:
    """The encoder budgets to try, and why there is only the floor where the traffic gives nothing to decide."""
    reqs = s.inp.traffic.requests
    keys = [k for r in reqs for k in r]
    repeats = len(set(keys)) < len(keys)
    widest = encoder_replay.no_wait_budget(reqs, s.tokens, s.inp.window)
    top = max(sum(s.tokens.values()), widest)  # from here nothing is evicted and nothing waits
    floor = f"its floor, {s.floor:,} tokens (the largest item the launch allows)"
    if top <= s.floor:
        return [s.floor], (
            f"the encoder cache has nothing to decide: every item of the traffic ({top:,} tokens) fits {floor} "
            "at once, so no larger budget hits more; every candidate keeps it there"
        )
    if not repeats and widest <= s.floor:
        return [s.floor], (
            f"the encoder cache has nothing to decide: no item is looked up twice and no request waits at "
            f"{floor}; every candidate keeps it there"
        )
    got = [t for t in grid(s.floor, top, max(points, 2)) if s.mnbt_for(t) >= s.max_seqs]
    return got or [s.today_tokens], None


def pool_choices(s: Scorer, points: int) -> tuple[list[int], str | None]:
    """The decode pools to try (whole MiB), and why there is only 0 where the pool decides nothing."""
    if not s.decodes:
        return [0], (
            "the GPU decode pool has nothing to decide: the traffic has no video it can size; every candidate "
            "sets it to 0 (off), which gives its bytes back to the KV cache"
        )
    if not s.inp.request.gpu_video_backend:
        return [0], (
            "the GPU decode pool has nothing to decide: only the PyNvVideoCodec backend decodes on the GPU and "
            "uses it, and this launch decodes videos on the host; every candidate sets it to 0 (off)"
        )
    # the smallest whole MiB whose share holds each video: refusals change only there
    need = sorted({-(-d.bytes * s.api // MiB) * MiB for d in s.decodes})
    if len(need) > points:
        need = sorted({need[(len(need) - 1) * i // (points - 1)] for i in range(points)} | {need[-1]})
    return need, None


def _prefix_notes(s: Scorer) -> list[TuneNote]:
    """What ``mmpool cache --engine vllm`` says of the prefix cache's traffic, in its words."""
    found = vllm_prefix.traffic_findings(s.built, s.inp.flags, len(s.inp.traffic.requests))
    return [TuneNote(code, severity, message) for code, severity, message in found]
