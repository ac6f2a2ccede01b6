"""What one image occupies in vLLM 0.34's multimodal caches, for the Qwen-VL families and Gemma 3.

The processed item (``MultiModalKwargsItem`` from the model's ``_create_qwen2vl_field_factory``)
holds a ``pixel_values`` of shape (patches, 3 × temporal × patch²) in the dtype vLLM's processing
leaves it (``item_bytes``: raw uint8 where the GPU normalizes, else the model's dtype) and a
3-element int64 ``image_grid_thw``:

- the LRU caches count ``MultiModalCache.get_item_size``, the tensors' ``nbytes``;
- the shm ring stores the object ``MsgpackSerde`` makes of it (``shm_object_storage.py``): a 4-byte
  reader count, the pickled ``(type name, nbytes, frame lengths)`` and the msgpack frames
  (``v1/serial_utils.py``: the item's structure with the 24-byte grid inline, then the pixels,
  above the 256-byte inline threshold, as their own frame), each chunk behind an 8-byte header.

The structure frame's length varies only with the dtype's name and how msgpack writes the two
integers that change (the patch count, twice, and the row length), checked against vLLM's
serializer in ``tests/data/vllm_cache_fixtures.json`` and ``tests/data/vllm_item_fixtures.json``.
A Gemma 3 image is ``pixel_values`` [crops, 3, size, size] and an int64 ``num_patches``.
``traffic_items`` sizes a traffic's items every way the caches count them. Pure core: standard library only.
"""

from __future__ import annotations

import pickle
from dataclasses import dataclass

from mmpool_cli.engines.vllm import encoder_budget as eb
from mmpool_cli.engines.vllm import item_bytes as ib
from mmpool_cli.engines.vllm.cache_traffic import CacheTrafficError, ImageTraffic
from mmpool_cli.engines.vllm.plan_encoder import gemma3_image_tokens, qwen_vision
from mmpool_cli.engines.vllm.request import QWEN_VERSION, VllmRequest
from mmpool_cli.workload import qwen

# the msgpack structure frame of a Qwen image item, less its three variable integers and the pixels'
# dtype name: the keys, the grid's dtype name, the field factories' names and keywords, the inline grid
IMAGE_FRAME_FIXED = 153
# the same for a Gemma 3 image (pixel_values [crops, 3, size, size] and an int64 num_patches): its shape's
# integers take the same bytes for any crop count below 128, so only the dtype's name varies
GEMMA3_FRAME_FIXED = 141
SHM_FLAG_BYTES = 4
PICKLE_PROTOCOL = 5  # pickle.HIGHEST_PROTOCOL of the Pythons vLLM 0.34 runs on (3.10-3.13)


def msgpack_uint_bytes(value: int) -> int:
    """Bytes msgpack takes for a non-negative integer.

    >>> [msgpack_uint_bytes(v) for v in (127, 128, 256, 65536, 1 << 32)]
    [1, 2, 3, 5, 9]
    """
    if value < 128:
        return 1
    if value < 1 << 8:
        return 2
    if value < 1 << 16:
        return 3
    if value < 1 << 32:
        return 5
    return 9


def patches(v: eb.QwenVision, tokens: int) -> int:
    """Rows of ``pixel_values`` for an item of ``tokens`` embedding tokens."""
    return tokens * v.merge_size**2


def row_elements(v: eb.QwenVision) -> int:
    return 3 * v.temporal_patch_size * v.patch_size**2


def item_size(v: eb.QwenVision, tokens: int, proc: ib.Processing) -> int:
    """``MultiModalCache.get_item_size`` of one image item: what the LRU caches count."""
    return ib.qwen_item(v, tokens, proc)


def shm_object_bytes(v: eb.QwenVision, tokens: int, proc: ib.Processing) -> int:
    """The object ``SingleWriterShmObjectStorage.put`` stores for one image item (its chunk less the
    8-byte ring header); compared with ``--mm-shm-cache-max-object-size-mb``."""
    n, row = patches(v, tokens), row_elements(v)
    pixels = ib.qwen_pixels(v, tokens, proc)
    frame = IMAGE_FRAME_FIXED + len(proc.pixel_dtype) + msgpack_uint_bytes(row) + 2 * msgpack_uint_bytes(n)
    return _shm_object(frame, pixels)


def gemma3_shm_object_bytes(crops: int, image_size: int, proc: ib.Processing) -> int:
    """The shm ring's object for one Gemma 3 image (as ``shm_object_bytes``)."""
    pixels = ib.gemma3_item(crops, image_size, proc) - ib.GEMMA3_NUM_PATCHES_BYTES
    return _shm_object(GEMMA3_FRAME_FIXED + len(proc.pixel_dtype), pixels)


def _shm_object(frame: int, pixels: int) -> int:
    """The reader count, the pickled header, the structure frame and the pixels' frame."""
    meta = pickle.dumps(("MultiModalKwargsItem", frame + pixels, [frame, pixels]), protocol=PICKLE_PROTOCOL)
    return SHM_FLAG_BYTES + len(meta) + frame + pixels


@dataclass(frozen=True)
class TrafficItems:
    """Each traffic key's encoder tokens, its processed item's ``get_item_size`` and its shm ring object."""

    tokens: dict[str, int]
    processed: dict[str, int]
    shm: dict[str, int]


def traffic_items(req: VllmRequest, traffic: ImageTraffic) -> TrafficItems:
    """The traffic's items as vLLM's processing leaves them (``item_bytes``): Qwen-VL families and Gemma 3."""
    proc = ib.of_request(req)
    vision = qwen_vision(req)
    if vision is not None:
        tokens = _qwen_tokens(req, vision, traffic)
        return TrafficItems(
            tokens,
            {k: item_size(vision, n, proc) for k, n in tokens.items()},
            {k: shm_object_bytes(vision, n, proc) for k, n in tokens.items()},
        )
    per_image = gemma3_image_tokens(req)
    if per_image is None or req.model is None:
        name = req.model.name if req.model else "no model"
        raise CacheTrafficError(
            f"--model {name}: mmpool knows the processed items of {', '.join(sorted(QWEN_VERSION))} and gemma3 "
            "(without pan-and-scan) only; give one of them or a model directory of one"
        )
    size = int(req.model.settings["image_size"])
    crops = dict.fromkeys(traffic.dims, 1)
    for key, nbytes in traffic.pixel_bytes.items():
        n = ib.gemma3_crops_of_trace_bytes(size, nbytes)
        if n is None:
            raise CacheTrafficError(
                f"a trace item of {nbytes:,} B is not the float32 pixels (as 'mmpool trace' writes them) of whole "
                f"{3 * size * size * ib.TRACE_PIXEL_BYTES:,}-byte crops of {req.model.name}: trace it "
                "with the same --model"
            )
        crops[key] = n
    return TrafficItems(
        {k: n * per_image for k, n in crops.items()},
        {k: ib.gemma3_item(n, size, proc) for k, n in crops.items()},
        {k: gemma3_shm_object_bytes(n, size, proc) for k, n in crops.items()},
    )


def _qwen_tokens(req: VllmRequest, vision: eb.QwenVision, traffic: ImageTraffic) -> dict[str, int]:
    tokens: dict[str, int] = {}
    by_dims: dict[tuple[int, int], int] = {}  # many images share a few sizes: each computed once
    for key, (w, h) in traffic.dims.items():
        if (w, h) not in by_dims:
            try:
                by_dims[w, h] = eb.image_tokens(vision, w, h)
            except qwen.ResizeError as e:
                raise CacheTrafficError(f"a {w}x{h} image: vLLM's processor refuses it ({e})") from None
        tokens[key] = by_dims[w, h]
    for key, nbytes in traffic.pixel_bytes.items():
        n = ib.tokens_of_trace_bytes(vision, nbytes)
        if n is None:
            raise CacheTrafficError(
                f"a trace item of {nbytes:,} B is not the float32 pixels (as 'mmpool trace' writes them) of whole "
                f"{ib.trace_bytes_per_token(vision):,}-byte tokens of "
                f"{req.model.name if req.model else 'this model'}: trace it with the same --model"
            )
        tokens[key] = n
    return tokens
