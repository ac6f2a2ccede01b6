"""Read a local Hugging Face model directory: its family, processor settings and attention shape.

``config.json`` names the family (``model_type``) and holds the text model's shape for the KV
cost; ``preprocessor_config.json`` (and ``video_preprocessor_config.json``, which transformers
falls back from to the former) holds the processor settings. Nothing is downloaded and no
weights are read. Pure core: standard library only, and huggingface_hub's cache lookup for a hub
id (imported only then).
"""

from __future__ import annotations

import dataclasses
import errno
import json
import os
import re
import stat
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import Any

from mmpool_cli.errors import MmpoolError
from mmpool_cli.workload.families import Family, family, family_of_model_type
from mmpool_cli.workload.items import quote_clipped
from mmpool_cli.workload.kv import KvModel

MAX_CONFIG_BYTES = 16 * 1024 * 1024
CONFIG = "config.json"
PREPROCESSOR = "preprocessor_config.json"
VIDEO_PREPROCESSOR = "video_preprocessor_config.json"

# SGLang's ``get_hf_text_config``: the first of these sub-configs holds the language model.
_TEXT_CONFIG_KEYS = ("thinker_config", "llm_config", "language_config", "text_config")
_KV_HEAD_KEYS = ("n_head_kv", "num_kv_heads", "num_key_value_heads", "multi_query_group_num", "num_attention_groups")


class ModelConfigError(MmpoolError):
    """A model directory or config file that cannot be read."""


@dataclass(frozen=True)
class Model:
    """A model as mmpool sizes it: its family, processor settings, and attention shape when known."""

    name: str
    family: Family
    settings: dict[str, Any]
    kv: KvModel | None
    config_path: str | None
    # what sglang serve --model-path takes for it: the directory given, or the hub id; None for a family
    model_path: str | None = None


def resolve(text: str, hub_cache: str | None = None) -> Model:
    """``--model``: a family name, a model directory or its ``config.json``, or a hub id in the local cache.

    A hub id (``owner/name``) is looked up in the Hugging Face cache with huggingface_hub's own
    cache lookup (``hub_cache``, else the cache ``HF_HUB_CACHE``/``HF_HOME`` name); nothing is
    downloaded.

    Raises:
        FamilyError: neither a known family nor an existing path.
        ModelConfigError: a path whose config is missing or unreadable, a hub id not in the cache.
    """
    shown = quote_clipped(text)
    path = Path(text).expanduser()
    try:
        exists = path.exists()
    except (OSError, ValueError) as e:
        raise ModelConfigError(f"--model {shown}: not a usable path ({getattr(e, 'strerror', None) or e})") from None
    if exists:
        return load(path)
    if path.is_symlink():
        raise ModelConfigError(f"--model {shown}: {_broken_link(path)}; give the model directory itself")
    if text.endswith(".json") or text.startswith((".", "/", "~")):
        raise ModelConfigError(f"--model {shown}: no such file or directory")
    if _HUB_ID.fullmatch(text):
        return _from_hub_cache(text, shown, hub_cache)
    if "/" in text:
        raise ModelConfigError(
            f"--model {shown}: no such local directory, and not a hub id (owner/name): give a model directory, "
            "a hub id in the local Hugging Face cache, or a family name"
        )
    fam = family(text)
    return Model(name=fam.name, family=fam, settings=dict(fam.settings), kv=None, config_path=None)


def _broken_link(path: Path) -> str:
    """Why a symbolic link leads nowhere: it loops, or its target is missing."""
    try:
        os.stat(path)
    except OSError as e:
        if e.errno == errno.ELOOP:
            return "a symbolic link that loops (it leads back to itself)"
        return f"a symbolic link to a missing path ({os.readlink(path)})"
    return "a symbolic link that cannot be followed"


def _special_kind(path: Path) -> str:
    """What a path that is neither a directory nor a regular file is: a device, a FIFO, a socket."""
    try:
        mode = os.stat(path).st_mode
    except OSError as e:
        return f"unreadable ({e.strerror or e})"
    kinds = (
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISFIFO, "a FIFO (named pipe)"),
    )
    return next((name for test, name in kinds if test(mode)), "a socket" if stat.S_ISSOCK(mode) else "a special file")


# A Hugging Face repository id, as huggingface_hub validates it (which has the last word).
_HUB_ID = re.compile(r"[A-Za-z0-9][\w.-]*/[A-Za-z0-9][\w.-]*")


def _from_hub_cache(repo_id: str, shown: str, hub_cache: str | None) -> Model:
    """The model of a hub id from the local cache, its snapshot directory read like any other."""
    try:
        # only for a hub id: family names and paths never load it
        from huggingface_hub import constants, try_to_load_from_cache
    except ImportError:
        raise ModelConfigError(
            f"--model {shown}: a hub id is read from the local Hugging Face cache through huggingface_hub, "
            "which is not installed here: pip install huggingface_hub (nothing is downloaded), or give the "
            "model's directory"
        ) from None
    # HF_HUB_CACHE is read now, as huggingface_hub reads it first (its constants are fixed at import)
    cache = hub_cache or os.environ.get("HF_HUB_CACHE") or constants.HF_HUB_CACHE
    try:
        found = try_to_load_from_cache(repo_id, CONFIG, cache_dir=cache)
    except ValueError:  # huggingface_hub's HFValidationError: not a repository id after all
        found = None
    if not isinstance(found, str) or not Path(found).is_file():
        raise ModelConfigError(
            f"--model {shown}: no such local directory, and not in the local Hugging Face cache {cache} "
            f"(no {CONFIG} of its main revision; "
            f"HF_HUB_CACHE or HF_HOME moves the cache) and nothing is downloaded: fetch the two files "
            f"(hf download {repo_id} {CONFIG} {PREPROCESSOR}), or give the model's directory"
        )
    return dataclasses.replace(load(Path(found).parent), name=repo_id, model_path=repo_id)


def _read_json(path: Path) -> dict[str, Any]:
    try:
        with path.open("rb") as f:
            data = f.read(MAX_CONFIG_BYTES + 1)
    except OSError as e:
        raise ModelConfigError(f"{path}: cannot read it ({e.strerror or e})") from None
    if len(data) > MAX_CONFIG_BYTES:
        raise ModelConfigError(f"{path}: larger than {MAX_CONFIG_BYTES // (1024 * 1024)} MiB, not a model config")
    try:
        value = json.loads(data)
    except (ValueError, RecursionError) as e:
        raise ModelConfigError(f"{path}: not valid JSON ({e})") from None
    if not isinstance(value, dict):
        raise ModelConfigError(f"{path}: expected a JSON object at the top level")
    return value


def load(path: Path) -> Model:
    """The model of a directory holding ``config.json``, or of that file itself.

    Raises:
        ModelConfigError: no ``config.json``, invalid JSON, or values that are not usable.
        FamilyError: a ``model_type`` mmpool has no processor rules for.
    """
    config_path = path / CONFIG if path.is_dir() else path
    if not path.is_dir() and not path.is_file():
        raise ModelConfigError(
            f"--model {quote_clipped(str(path))}: this is {_special_kind(path)}, not a model directory or its "
            f"{CONFIG}; give a Hugging Face model directory, its config.json, or a family name"
        )
    if not config_path.is_file():
        raise ModelConfigError(
            f"--model {quote_clipped(str(path))}: the directory has no {CONFIG}; give a Hugging Face model directory, "
            f"its {CONFIG}, or a family name"
        )
    config = _read_json(config_path)
    model_type = config.get("model_type")
    if not isinstance(model_type, str):
        raise ModelConfigError(f"{config_path}: has no 'model_type' string, so the model family is unknown")
    fam = family_of_model_type(model_type, str(config_path))
    settings = dict(fam.settings)
    image_file = config_path.parent / PREPROCESSOR
    image_cfg = _read_json(image_file) if image_file.is_file() else {}
    video_file = config_path.parent / VIDEO_PREPROCESSOR
    video_cfg = _read_json(video_file) if video_file.is_file() else image_cfg
    _apply_processor(fam, settings, image_cfg, video_cfg, image_file)
    kv = kv_model(config, str(config_path))
    directory = str(path if path.is_dir() else path.parent)
    return Model(
        name=str(path), family=fam, settings=settings, kv=kv, config_path=str(config_path), model_path=directory
    )


def _positive(value: Any, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ModelConfigError(f"{where}: expected a positive integer, got {quote_clipped(repr(value))}")
    return value


def _apply_processor(
    fam: Family, settings: dict[str, Any], image: dict[str, Any], video: dict[str, Any], where: Path
) -> None:
    def take(cfg: dict[str, Any], key: str, setting: str) -> None:
        if cfg.get(key) is not None:
            settings[setting] = _positive(cfg[key], f"{where}: {key}")

    def bounds(cfg: dict[str, Any], low: str, high: str) -> None:
        # transformers: min_pixels / max_pixels override size.shortest_edge / longest_edge
        size = cfg.get("size")
        if isinstance(size, dict):
            take(size, "shortest_edge", low)
            take(size, "longest_edge", high)
        take(cfg, "min_pixels", low)
        take(cfg, "max_pixels", high)

    if fam.name.startswith("qwen"):
        for key in ("patch_size", "merge_size", "temporal_patch_size"):
            take(image, key, key)
        bounds(image, "min_pixels", "max_pixels")
        bounds(video, "video_min_pixels", "video_max_pixels")
    elif fam.name == "gemma3":
        size = image.get("size")
        if isinstance(size, dict) and size.get("height") is not None:
            settings["image_size"] = _positive(size["height"], f"{where}: size.height")
        if image.get("do_pan_and_scan") is not None:
            settings["pan_and_scan"] = bool(image["do_pan_and_scan"])
        take(image, "pan_and_scan_min_crop_size", "pan_and_scan_min_crop_size")
        take(image, "pan_and_scan_max_num_crops", "pan_and_scan_max_num_crops")
        ratio = image.get("pan_and_scan_min_ratio_to_activate")
        if isinstance(ratio, int | float) and not isinstance(ratio, bool) and ratio > 0:
            # the JSON number is a Python float in transformers; Fraction(float) keeps its exact value
            settings["pan_and_scan_min_ratio_to_activate"] = Fraction(ratio)
    elif fam.name == "llama4":
        take(image, "max_patches", "max_patches")
        size = image.get("size")
        if isinstance(size, dict) and size.get("height") is not None:
            settings["tile_size"] = _positive(size["height"], f"{where}: size.height")
    elif fam.name == "kimi-k2.5":
        media = image.get("media_proc_cfg", image)
        if isinstance(media, dict):
            take(media, "patch_size", "patch_size")
            take(media, "merge_kernel_size", "merge_size")
            take(media, "in_patch_limit", "in_patch_limit")
            take(media, "patch_limit_on_one_side", "patch_limit_on_one_side")


def _text_config(config: dict[str, Any]) -> dict[str, Any]:
    architectures = config.get("architectures") or []
    first = architectures[0] if isinstance(architectures, list) and architectures else ""
    if isinstance(first, str) and first.startswith("Llava") and first.endswith("ForCausalLM"):
        return config
    for key in _TEXT_CONFIG_KEYS:
        sub = config.get(key)
        if isinstance(sub, dict):
            inner = sub.get("text_config") if key == "thinker_config" else None
            return inner if isinstance(inner, dict) else sub
    return config


def _approximate(text: dict[str, Any]) -> str | None:
    layer_types = text.get("layer_types")
    if isinstance(layer_types, list) and any(t != "full_attention" for t in layer_types):
        kinds = sorted({str(t) for t in layer_types if t != "full_attention"})
        return f"hybrid layers ({', '.join(kinds)}): SGLang sizes their KV pools separately"
    if text.get("use_sliding_window") is True or text.get("sliding_window_pattern") is not None:
        return "sliding-window layers: SGLang sizes their KV pool separately"
    if text.get("attention_chunk_size") is not None:
        return "chunked-attention layers: SGLang sizes their KV pool separately"
    if any(k.startswith(("mamba", "ssm_", "linear_")) for k in text) or "hybrid_override_pattern" in text:
        return "Mamba / linear-attention layers: SGLang sizes their state separately"
    return None


def kv_model(config: dict[str, Any], where: str) -> KvModel | None:
    """The attention shape SGLang reads from ``config``'s text model; None where it has no layers."""
    text = _text_config(config)
    layers = text.get("num_hidden_layers")
    if layers is None:
        return None
    layers = _positive(layers, f"{where}: num_hidden_layers")
    approximate = _approximate(text)
    if text.get("kv_lora_rank") is not None:
        return KvModel(
            attention="mla",
            layers=layers,
            kv_lora_rank=_positive(text["kv_lora_rank"], f"{where}: kv_lora_rank"),
            qk_rope_head_dim=_positive(text.get("qk_rope_head_dim"), f"{where}: qk_rope_head_dim"),
            approximate=approximate,
        )
    heads = _positive(text.get("num_attention_heads"), f"{where}: num_attention_heads")
    if text.get("multi_query") is True:
        kv_heads = 1
    else:
        kv_heads = next((text[k] for k in _KV_HEAD_KEYS if text.get(k) is not None), heads)
        kv_heads = _positive(kv_heads, f"{where}: number of KV heads")
    head_dim = text.get("head_dim")
    if head_dim is None:
        head_dim = _positive(text.get("hidden_size"), f"{where}: hidden_size") // heads
    head_dim = _positive(head_dim, f"{where}: head_dim")
    v_head_dim = text.get("v_head_dim") or head_dim
    return KvModel(
        attention="mha",
        layers=layers,
        kv_heads=kv_heads,
        head_dim=head_dim,
        v_head_dim=_positive(v_head_dim, f"{where}: v_head_dim"),
        approximate=approximate,
    )
