"""What one image occupies in vLLM 0.34's multimodal caches, for the Qwen-VL families.

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
Pure core: standard library only.
"""

from __future__ import annotations

import pickle

from mmpool_cli.engines.vllm import encoder_budget as eb
from mmpool_cli.engines.vllm import item_bytes as ib

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
