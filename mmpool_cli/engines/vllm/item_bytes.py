"""What vLLM keeps of one processed item: the dtype of its pixels and the bytes of every tensor.

vLLM runs the model's HF processor on the API process, then casts only its floating tensors, to
the model's dtype (``multimodal/processing/context.py``, ``_postprocess_output``: "This mimics the
behavior of transformers.BatchFeature"). What the processor returns depends on
``--mm-device-do-normalize``: unset (``None``, the CLI's default in 0.30-0.34) it takes the model
class's ``supports_mm_device_do_normalize`` (``config/model.py``); on for a class without it, it is
forced off. On, vLLM passes ``do_rescale=False, do_normalize=False`` to the processor
(``config/multimodal.py``), which then returns the resized raw ``uint8`` pixels, left uncast; off,
it returns float32 pixels, cast to the model's dtype.

The model's dtype is ``--dtype``: ``auto`` (the default) takes the config's ``dtype``/``torch_dtype``
and turns float32 (or none) into the platform's first choice, bfloat16 on the GPUs vLLM plans
for (``_resolve_auto_dtype``); ``half``/``float16``, ``bfloat16`` and ``float``/``float32`` are
taken as written. The release's facts (which families' classes support the flag, where each rule
is) come from ``data/releases.json``.

Every place that sizes a vLLM item takes this module: the processor cache and its shm ring
(``cache_items``), the encoder plan's per-item bytes (``plan_encoder``), ``mmpool cache``'s items
read from a trace (``caches``). Pure core: standard library only.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mmpool_cli.engines.vllm import encoder_budget as eb
from mmpool_cli.engines.vllm.versions import Release

if TYPE_CHECKING:
    from mmpool_cli.engines.vllm.request import VllmRequest

DTYPE_BYTES = {"uint8": 1, "float16": 2, "bfloat16": 2, "float32": 4}
INT64 = 8
GRID_THW_BYTES = 3 * INT64  # image_grid_thw / video_grid_thw of one item: 3 int64
GEMMA3_NUM_PATCHES_BYTES = INT64  # Gemma 3's num_patches of one image: one int64
GEMMA3_IMAGE_TOKENS = 256  # the checkpoints' image_seq_length (mm_tokens_per_image): embeds per crop
# what --dtype names (config/model.py _STR_DTYPE_TO_TORCH_DTYPE)
DTYPE_FLAG = {"half": "float16", "float16": "float16", "bfloat16": "bfloat16", "float": "float32", "float32": "float32"}
# the dtype ``auto`` gives a checkpoint of each config dtype: float32 (or none) is downcast
AUTO_DTYPE = {"float16": "float16", "bfloat16": "bfloat16", "float32": "bfloat16"}
# mmpool's traces (``mmpool trace``) carry SGLang's pixel_values: float32 from the HF processor
TRACE_PIXEL_BYTES = 4


@dataclass(frozen=True)
class Processing:
    """How vLLM processes a launch's items: where pixels are normalized and what dtype they are kept in."""

    family: str | None
    device_normalize: bool
    model_dtype: str
    pixel_dtype: str
    why: str  # one sentence: which flag or default decided it

    @property
    def pixel_bytes(self) -> int:
        """Bytes of one pixel element of ``pixel_values`` / ``pixel_values_videos``."""
        return DTYPE_BYTES[self.pixel_dtype]


def model_dtype(flag: str | None, config_dtype: str | None) -> str:
    """The model's dtype for ``--dtype`` (``None`` is ``auto``) and the config's dtype.

    >>> model_dtype(None, "bfloat16"), model_dtype("auto", "float32"), model_dtype("half", "bfloat16")
    ('bfloat16', 'bfloat16', 'float16')
    """
    text = (flag or "auto").lower()
    if text == "auto":
        return AUTO_DTYPE.get(config_dtype or "float32", "bfloat16")
    return DTYPE_FLAG[text]


def config_dtype(config_path: str | None) -> str | None:
    """The checkpoint's dtype as vLLM reads it: the config's ``dtype`` (``torch_dtype`` in older files),
    else its text config's, else its vision config's; None where none is given (or no config)."""
    if config_path is None:
        return None
    from mmpool_cli.workload.hf import _read_json

    config = _read_json(Path(config_path))
    for part in (config, config.get("text_config"), config.get("vision_config")):
        if isinstance(part, dict):
            for key in ("dtype", "torch_dtype"):
                value = part.get(key)
                if isinstance(value, str) and value.removeprefix("torch.") in AUTO_DTYPE:
                    return value.removeprefix("torch.")
    return None


def processing(
    release: Release, family: str | None, flag: bool | None = None, dtype: str | None = None, config: str | None = None
) -> Processing:
    """The processing of ``family``'s items under ``release`` with ``--mm-device-do-normalize`` ``flag``
    (None: unset), ``--dtype`` ``dtype`` (None: auto) and the config's dtype ``config``.

    >>> from mmpool_cli.engines.vllm.versions import release
    >>> processing(release("0.34.0"), "qwen2.5-vl").pixel_dtype, processing(release("0.33.0"), "gemma3").pixel_dtype
    ('uint8', 'bfloat16')
    """
    supported = release.device_normalize.get(family or "", False)
    model = model_dtype(dtype, config)
    name = family or "this model"
    if flag is None:
        on = supported
        why = (
            f"--mm-device-do-normalize unset: vLLM {release.version} takes {name}'s support flag "
            f"({'set' if supported else 'not set'})"
        )
    elif flag and not supported:
        on = False
        why = f"--mm-device-do-normalize: vLLM {release.version} forces it off ({name}'s class does not support it)"
    else:
        on = flag
        why = f"--{'' if flag else 'no-'}mm-device-do-normalize"
    if on:
        return Processing(family, True, model, "uint8", why + ": raw uint8 pixels, normalized on the GPU")
    return Processing(family, False, model, model, why + f": pixels normalized on the host, cast to {model}")


def of_request(req: VllmRequest) -> Processing:
    """The processing of a ``VllmRequest``'s model (its family, flags and config)."""
    model = req.model
    family = model.family.name if model is not None else None
    config = config_dtype(model.config_path) if model is not None else None
    return processing(req.release, family, req.device_normalize, req.dtype, config)


def qwen_pixels(v: eb.QwenVision, tokens: int, proc: Processing) -> int:
    """Bytes of the ``pixel_values`` (or ``pixel_values_videos``) of an item of ``tokens`` embedding tokens:
    tokens × merge² patches of 3 × temporal × patch² elements."""
    return tokens * v.merge_size**2 * 3 * v.temporal_patch_size * v.patch_size**2 * proc.pixel_bytes


def qwen_item(v: eb.QwenVision, tokens: int, proc: Processing) -> int:
    """``MultiModalCache.get_item_size`` of a Qwen-VL image (or video) item: its pixels and its grid."""
    return qwen_pixels(v, tokens, proc) + GRID_THW_BYTES


def tokens_of_trace_bytes(v: eb.QwenVision, nbytes: int) -> int | None:
    """The embedding tokens of an item a trace gives as ``nbytes`` of pixels (SGLang's float32
    ``pixel_values``, as ``mmpool trace`` writes them), or None where they are not whole tokens."""
    per_token = v.merge_size**2 * 3 * v.temporal_patch_size * v.patch_size**2 * TRACE_PIXEL_BYTES
    if nbytes <= 0 or nbytes % per_token:
        return None
    return nbytes // per_token


def trace_bytes_per_token(v: eb.QwenVision) -> int:
    """The trace's pixel bytes per embedding token (for the message refusing a trace item)."""
    return v.merge_size**2 * 3 * v.temporal_patch_size * v.patch_size**2 * TRACE_PIXEL_BYTES


def gemma3_item(crops: int, image_size: int, proc: Processing) -> int:
    """``MultiModalCache.get_item_size`` of a Gemma 3 image: ``crops`` (1, or 1 + its pan-and-scan crops)
    square images of ``image_size`` pixels, 3 channels, and its int64 ``num_patches``."""
    return crops * 3 * image_size * image_size * proc.pixel_bytes + GEMMA3_NUM_PATCHES_BYTES


def gemma3_crops(settings: Any) -> int | None:
    """Crops of every Gemma 3 image under vLLM: 1 without pan-and-scan (the checkpoints' default, which
    vLLM keeps: ``get_num_crops`` is 0 unless ``do_pan_and_scan``), None with it (not modelled here)."""
    return None if settings.get("pan_and_scan") else 1


def gemma3_crops_of_trace_bytes(image_size: int, nbytes: int) -> int | None:
    """The crops of a Gemma 3 item a trace gives as ``nbytes`` of SGLang's float32 ``pixel_values``
    ([crops, 3, size, size]), or None where they are not whole crops."""
    per_crop = 3 * image_size * image_size * TRACE_PIXEL_BYTES
    if nbytes <= 0 or nbytes % per_crop:
        return None
    return nbytes // per_crop
