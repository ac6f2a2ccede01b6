"""SGLang 0.5.23's two multimodal caches, driven as SGLang drives them, and their sizes in a deployment.

* The **embedding cache** (``mem_cache/multimodal_cache.py`` ``MultiModalStaticCache``, in the
  scheduler, on the GPU): an LRU counted in the embeddings' bytes (``_get_tensor_size``: tokens ×
  the embedding's width × 2 bytes of bfloat16; a slice is cloned on admission, so its own bytes),
  of ``SGLANG_VLM_CACHE_SIZE_MB`` MiB (default 100, ``environ.py``; ``init_mm_embedding_cache`` in
  ``mem_cache/kv_cache_builder.py``). ``managers/mm_schedule.py`` drives it per modality of each
  request: one lookup per distinct item when every item of that modality is one run of
  placeholder tokens (images; Qwen2.5-VL's videos: ``_batch_encode_per_image_misses``,
  ``get_single``/``set``; an item the request holds twice is looked up again where it missed),
  else one lookup of the combined hash of the request's items of that modality
  (``_get_chunked_embedding_full``: Qwen3-VL's videos, whose frames are split by their timestamps).
  An embedding larger than the whole cache is never admitted.
* The **preprocess cache** (``multimodal/cache/preprocess_cache.py`` ``MultimodalPreprocessCache``,
  host RAM, one per tokenizer process): an LRU of at most 8192 entries counted by its own size
  provider (``estimate_cache_size_bytes`` over ``QwenVLImagePreprocessArtifact.cache_size_items``:
  the two 71-character digests, the feature hash's ``int``, the float32 ``pixel_values`` and the
  ``image_grid_thw`` entry). The Qwen-VL processor uses it for requests of images only
  (``qwen_vl.py`` ``process_mm_data_async``): each image is looked up (a repeat within a request hits
  again), each distinct miss computed once and stored. Its size is ``--mm-preprocess-cache-size-mb``
  (the processor's own default when unset: 0 for Qwen-VL, ``base_processor.py``) split evenly over
  ``--tokenizer-worker-num`` processes.
* Qwen3-VL on a large Hopper GPU: unless ``SGLANG_VLM_CACHE_SIZE_MB`` is set, SGLang sets it to 0
  (``arg_groups/model_overrides/qwen3_vl.py``: SM 9.0 and at least 60 GiB). mmpool has no GPU to
  look at: ``--gpu-name`` says which serves it (every Hopper data-center part, H100, H200, H800,
  H20, GH200, has more than 60 GiB).

Pure core: standard library only.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from mmpool_cli.caches.curve import Curve, lru_curve
from mmpool_cli.caches.replay import (
    ONE_PASS,
    REPLAYED,
    first_setting,
    one_pass,
    replayed_curve,
)
from mmpool_cli.caches.report import (
    CacheItem,
    CacheNote,
    CacheReport,
    CacheResult,
    Recommendation,
    hits_needed,
)
from mmpool_cli.core.units import MiB, format_size
from mmpool_cli.core.words import count
from mmpool_cli.engines.sglang import prefix, versions
from mmpool_cli.engines.sglang.cache_lookups import (
    _Ids,
    _Lookups,
    embedding_lookups,
    embedding_lookups_at,
    looked_up_work,
)
from mmpool_cli.engines.sglang.env_vars import vlm_cache_from_env
from mmpool_cli.errors import MmpoolError
from mmpool_cli.inputs.traffic.cache_request import CacheRequest

FAMILIES = ("qwen2-vl", "qwen2.5-vl", "qwen3-vl")
PREPROCESS_MAX_ENTRIES = 8192  # base_processor.py: MultimodalPreprocessCache(max_entries=8192)
# estimate_cache_size_bytes of an artifact beyond its pixels: content_digest and artifact_key
# ("sha256:" + 64 hex each), the feature hash (sys.getsizeof of a 64-bit int: 36 from 2**60, which
# 15 in 16 hashes reach; 32 or 28 below), the "image_grid_thw" key, and 24 bytes of grid per image
# of the batch it was computed in (the row is a view of the batch's grid).
ARTIFACT_OVERHEAD = 71 + 71 + 36 + 14
GRID_ROW_BYTES = 24
FEATURE_DTYPE_BYTES = 4  # float32 pixel_values
_HOPPER = re.compile(r"(?<![a-z0-9])g?h(100|200|800|20)(?![0-9])", re.IGNORECASE)


REPLAY_POINTS = 64  # the curve's points where one pass is not exact (each a replay)


def large_hopper(gpu_name: str) -> bool:
    """Whether SGLang's Qwen3-VL override sees a large Hopper GPU in ``gpu_name`` (SM 9.0, >= 60 GiB)."""
    return _HOPPER.search(gpu_name) is not None


def caches(req: CacheRequest) -> CacheReport:
    """Both caches replayed over ``req``'s items. Raises MmpoolError for what cannot be sized."""
    fam = req.family.name
    if fam not in FAMILIES:
        raise MmpoolError(
            f"{req.family.title}: mmpool sizes SGLang's multimodal caches for {', '.join(FAMILIES)} only so far"
        )
    width = _width(req)
    tokens = item_tokens(req)
    # where the traffic carries prompts, the radix cache in front decides what is looked up
    radix = prefix.replay(req, tokens, list(_requests(req.items)), req.shape.kv_cell_bytes) if req.prompts else None
    emb = embedding_lookups(req, tokens, width, radix.covered if radix is not None else frozenset())
    pre = _preprocess_lookups(req)
    emb_size, emb_origin = embedding_size(req)
    pre_size, pre_origin, _ = preprocess_size(req)
    results = [
        _result(req, "embedding", "embedding cache (GPU, scheduler)", emb, emb_size, emb_origin, "encoder tokens", 0),
        _result(
            req,
            "preprocess",
            "preprocess cache (host, each tokenizer process)",
            pre,
            pre_size,
            pre_origin,
            "images preprocessed",
            PREPROCESS_MAX_ENTRIES,
        ),
    ]
    notes = list(req.notes)
    results[0].extra["encoder_tokens"] = looked_up_work(emb) - results[0].work_saved  # computed at its size
    if radix is not None:
        results[0].extra["served_by_prefix"] = radix.items_served
        results.append(radix.result)
        notes.extend(radix.notes)
    results[0].notes.append(prefix.prefix_note(radix.items_served if radix is not None else None))
    knobs = ("SGLANG_VLM_CACHE_SIZE_MB", "--mm-preprocess-cache-size-mb", "--max-total-tokens")
    for c, knob in zip(results, knobs[: len(results)], strict=True):
        if c.size_bytes == 0 and c.name != "prefix":  # the radix cache's own finding says it is off
            notes.append(
                CacheNote(
                    "cache-off",
                    "info",
                    f"the {c.title} is off in this deployment ({c.size_origin}): its hits are 0; the curve shows "
                    f"what {knob} would buy",
                )
            )
        if not c.meets_target():
            rec = c.recommendation
            to = f"; {rec.setting} reaches it ({format_size(rec.size_bytes)})" if rec is not None else ""
            message = (
                f"the {c.title} makes {count(c.hits, 'hit')} at {format_size(c.size_bytes)}, short of "
                f"{c.target}% of the {c.curve.unbounded[0]:,} an unbounded one makes{to}"
            )
            if c.name == "prefix":
                message = prefix.below_target(c, req.prefix.disabled)
            notes.append(CacheNote("cache-below-target", "warning", message))
    return CacheReport(engine=f"SGLang {versions.NEWEST}", source=req.source, caches=results, notes=notes)


def embedding_size(req: CacheRequest) -> tuple[int, str]:
    """The embedding cache's bytes in the deployment, and how they were set."""
    vlm = vlm_cache_from_env(req.environ)
    if req.family.name == "qwen3-vl" and vlm.variable is None:
        if req.gpu_name is None:
            raise MmpoolError(
                f"qwen3-vl: SGLang {versions.NEWEST} turns the embedding cache off on a Hopper GPU of 60 GiB or more "
                "unless SGLANG_VLM_CACHE_SIZE_MB is set (arg_groups/model_overrides/qwen3_vl.py); say which GPU serves "
                "it: --gpu-name NAME (H100, H200, A100, ...), or set SGLANG_VLM_CACHE_SIZE_MB"
            )
        if large_hopper(req.gpu_name):
            return 0, f"0: SGLang turns it off for Qwen3-VL on {req.gpu_name} (SGLANG_VLM_CACHE_SIZE_MB not set)"
    if vlm.variable is None:
        return vlm.mb * MiB, f"SGLANG_VLM_CACHE_SIZE_MB={vlm.mb} (SGLang's default)"
    if vlm.invalid:
        return vlm.mb * MiB, f"{vlm.variable}={vlm.raw!r} is not an integer: SGLang uses its default {vlm.mb} MiB"
    if vlm.mb < 0:
        return 0, f"{vlm.variable}={vlm.mb}: a negative size, which admits nothing"
    return vlm.mb * MiB, f"{vlm.variable}={vlm.mb}"


def preprocess_size(req: CacheRequest) -> tuple[int, str, int]:
    """The preprocess cache's bytes in each tokenizer process, how they were set, and the MiB in all."""
    workers = max(req.workers, 1)
    if req.preprocess_mb is None:
        mb, origin = 0, "--mm-preprocess-cache-size-mb not set: the Qwen-VL processor's own size, 0 (off)"
    else:
        mb, origin = req.preprocess_mb, f"--mm-preprocess-cache-size-mb {req.preprocess_mb}"
    per = mb * MiB // workers
    if workers > 1:
        origin += f", over {workers} tokenizer processes: {per:,} B each"
    return per, origin, mb


def _width(req: CacheRequest) -> int:
    shape = req.shape
    if shape.hidden_size is None:
        raise MmpoolError(
            f"{req.family.name}: the embedding cache holds tokens × the text model's hidden size × 2 bytes, and "
            "a family name does not say the hidden size; give --model DIR (its config.json) or --hidden-size N"
        )
    if req.family.name == "qwen3-vl":
        return shape.hidden_size * (1 + (3 if shape.deepstack is None else shape.deepstack))
    return shape.hidden_size


def item_tokens(req: CacheRequest) -> list[int]:
    """Each item's embedding tokens (``_tokens``), worked out once per kind and size (a log's items repeat
    a few sizes), the first item of each refused as ``_tokens`` refuses it."""
    known: dict[tuple[str, int], int] = {}
    out: list[int] = []
    for item in req.items:
        got = known.get((item.kind, item.nbytes))
        if got is None:
            got = known[item.kind, item.nbytes] = _tokens(req, item)
        out.append(got)
    return out


def _tokens(req: CacheRequest, item: CacheItem) -> int:
    """An item's embedding tokens, from its float32 ``pixel_values``: rows = patches, tokens = rows / merge²."""
    s = req.settings
    video = item.kind == "video"

    def setting(name: str) -> int:
        value = s.get(f"video_{name}") if video else None
        return int(value if value else s[name])

    patch, temporal, merge = setting("patch_size"), setting("temporal_patch_size"), setting("merge_size")
    row = FEATURE_DTYPE_BYTES * 3 * temporal * patch * patch
    rows, rest = divmod(item.nbytes, row)
    if rest or rows % (merge * merge):
        raise MmpoolError(
            f"{item.label or item.request}: {item.nbytes:,} B is not a {req.family.title} feature (whole "
            f"{merge}x{merge} groups of {row:,}-byte patch rows); was the trace made for another model?"
        )
    return rows // (merge * merge)


_requests = prefix.requests_of
def _preprocess_lookups(req: CacheRequest) -> _Lookups:
    """One lookup per image of a request of images only; a distinct miss stored as an artifact whose
    pixels and grid row are views of the batch of the request's misses (each counted at the whole batch).
    The work a hit saves: one preprocessing per distinct image (SGLang counts a miss per distinct image)."""
    ids = _Ids()
    out = _Lookups([], [], [], [], [], shared=[], max_entries=PREPROCESS_MAX_ENTRIES)
    unique = 0
    for n, group in enumerate(_requests(req.items)):
        if any(it.kind == "video" for _, it in group):
            continue  # a request with a video takes the uncached path (qwen_vl.py process_mm_data_async)
        distinct: set[object] = set()
        for _, it in group:  # each image looked up (get_if_present), a repeat too: it moves a hit again
            k: object = it.key if it.key is not None else object()
            out.keys.append(ids(it.key))
            out.sizes.append(ARTIFACT_OVERHEAD)
            assert out.shared is not None
            out.shared.append(it.nbytes + GRID_ROW_BYTES)
            out.weights.append(1)
            out.work.append(0 if k in distinct else 1)
            out.groups.append(n)
            distinct.add(k)
        unique += len(distinct)
    return _Lookups(out.keys, out.sizes, out.weights, out.work, out.groups, unique, out.shared, out.max_entries)


def _result(
    req: CacheRequest,
    name: str,
    title: str,
    looks: _Lookups,
    size: int,
    origin: str,
    unit: str,
    max_entries: int,
) -> CacheResult:
    lk = looks.neutral()
    exact = one_pass(lk)
    workers = 1 if name == "embedding" else max(req.workers, 1)

    def size_of(mb: int) -> int:
        return mb * MiB // workers

    def setting_of(nbytes: int) -> int:
        return -(-(nbytes * workers) // MiB)

    rec: Recommendation | None = None
    if exact is not None:
        curve = one_pass_curve(looks, exact, max_entries)
        method = ONE_PASS
        need = hits_needed(curve, req.target)
        mb = first_setting(curve.steps, need, setting_of, size_of) if need > 0 else None
    else:
        method = REPLAYED
        curve, mb = replayed_curve(lk, size, REPLAY_POINTS, lambda c: hits_needed(c, req.target), size_of, setting_of)
    if mb is not None and mb > 0:
        rec = _recommend(req, name, mb)
    lookups = None
    if name == "embedding":
        lookups = embedding_lookups_at(looks, size)
    if name == "preprocess":  # SGLang counts a hit per image, a miss per distinct image missed
        hits, distinct_hits = curve.at(size) if size > 0 else (0, 0)
        lookups = hits + looks.unique - distinct_hits if size > 0 else 0
    return CacheResult(
        name=name,
        engine="sglang",
        title=title,
        size_bytes=size,
        size_origin=origin,
        curve=curve,
        work_unit=unit,
        target=req.target,
        recommendation=rec,
        lookups=lookups,
        method=method,
    )


def one_pass_curve(looks: _Lookups, exact: Sequence[int], max_entries: int) -> Curve:
    """The curve of ``looks`` from one pass, where ``one_pass`` found it exact (``exact``: each lookup's bytes)."""
    return lru_curve(looks.keys, exact, looks.weights, looks.work, groups=looks.groups, max_entries=max_entries)


def _recommend(req: CacheRequest, name: str, mb: int) -> Recommendation:
    if name == "embedding":
        cost = {"gpu_bytes_per_rank": mb * MiB}
        if req.shape.kv_cell_bytes:
            cost["kv_tokens_per_rank"] = mb * MiB // req.shape.kv_cell_bytes
        return Recommendation(mb * MiB, f"SGLANG_VLM_CACHE_SIZE_MB={mb}", cost)
    workers = max(req.workers, 1)
    per = mb * MiB // workers
    return Recommendation(
        per,
        f"--mm-preprocess-cache-size-mb {mb}",
        {"host_bytes_per_tokenizer_process": per, "host_bytes_all_processes": per * workers},
    )
