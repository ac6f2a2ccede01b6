"""The digest that recognises a pool method: sha256 of its source text, as its file spells it.

Source text rather than bytecode: ``co_code`` and its constants change with every Python minor
release (3.10 to 3.13 each compile the same method differently), while the text a release ships is
the same under all of them. The text is cut with ``ast`` (from the first decorator's line to the
method's last line, dedented), so the script that writes ``digests.json`` from a wheel and the hook
inside a server compute it identically, without importing SGLang. Standard library only.
"""

from __future__ import annotations

import ast
import hashlib
import json
import os
import textwrap

# a vLLM processor-cache sender's methods the recording wraps or relies on
VLLM_SENDER = ("__init__", "is_cached_item", "get_and_update_item", "touch_sender_cache_item", "clear_cache")
# module -> class -> the methods whose code the recording relies on (wrapped or only read); class "":
# the module's own functions
TARGETS: dict[str, dict[str, tuple[str, ...]]] = {
    "sglang.srt.multimodal.transport.memory_pool": {
        "StreamOrderedMmFeaturePool": (
            "__init__",
            "_allocate_locked",
            "_release_locked",
            "_merge_ranges_locked",
            "_recycle_ready_leases_locked",
            "_recycle_loop",
            "copy_tensor",
            "cancel_lease",
        ),
    },
    "sglang.srt.multimodal.transport.cuda_ipc": {
        "MmItemMemoryPool": ("__init__", "wrap_tensor", "cancel_proxy", "_warn_pool_full_once"),
    },
    "sglang.srt.mem_cache.multimodal_cache": {
        "MultiModalStaticCache": ("__init__", "get", "get_single", "set", "has", "free", "clear"),
    },
    # the scheduler's batches of embedding-cache lookups: each call of these begins one (mm_schedule.py)
    "sglang.srt.managers.mm_schedule": {
        "": (
            "init_mm_embedding_cache",
            "_batch_encode_per_image_misses",
            "_get_chunked_embedding_by_item",
            "_get_chunked_embedding_full",
            "_get_chunked_prefill_embedding",
        ),
    },
    "sglang.srt.multimodal.cache.preprocess_cache": {
        "MultimodalPreprocessCache": (
            "__init__",
            "enabled",
            "get",
            "get_if_present",
            "put",
            "pop",
            "clear",
            "get_or_compute",
            "_compute_shared_value",
            "lookup_or_claim_many",
            "complete_miss",
        ),
    },
    # vLLM's processor cache: 0.30.0 has it in one module, 0.31.0 and later in a package of three
    "vllm.multimodal.cache": {
        "BaseMultiModalCache": ("cache_if_fits",),
        "BaseMultiModalProcessorCache": ("is_cached",),
        "MultiModalProcessorOnlyCache": VLLM_SENDER,
        "MultiModalProcessorSenderCache": (*VLLM_SENDER, "invalidate"),
        "ShmObjectStoreSenderCache": VLLM_SENDER,
    },
    "vllm.multimodal.cache.base": {
        "BaseMultiModalCache": ("cache_if_fits",),
        "BaseMultiModalProcessorCache": ("is_cached",),
        "MultiModalProcessorOnlyCache": VLLM_SENDER,
    },
    "vllm.multimodal.cache.lru": {"LruKeyReplicatedSenderCache": (*VLLM_SENDER, "invalidate")},
    "vllm.multimodal.cache.shm": {"ShmObjectStoreSenderCache": VLLM_SENDER},
    "vllm.v1.core.encoder_cache_manager": {
        "EncoderCacheManager": (
            "__init__",
            "reset",
            "check_and_update_cache",
            "can_allocate",
            "allocate",
            "free_encoder_input",
            "free",
        ),
    },
    "sglang.srt.utils.cuda_vmm_transport_utils": {
        "CudaVmmMemoryPool": (
            "control_size",
            "wrap_tensor",
            "wrap_tensors",
            "_reserve_for_publish",
            "_reserve_chunk",
            "_release_reserved_chunk",
            "_cancel_control_offset",
            "cancel_proxy",
            "_recycle_loop",
            "_recycle_chunks",
            "_merge_chunks",
        ),
    },
}

DIGESTS_FILE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "digests.json")


def methods(source: str, cls: str) -> dict[str, tuple[int, str]]:
    """Each method of class ``cls`` in ``source`` (``cls`` "": each function of the module): (its first
    line, the sha256 of its dedented text)."""
    tree = ast.parse(source)
    lines = source.splitlines()
    out: dict[str, tuple[int, str]] = {}
    bodies = [tree.body] if not cls else [n.body for n in tree.body if isinstance(n, ast.ClassDef) and n.name == cls]
    for body in bodies:
        for item in body:
            if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
                first = min([d.lineno for d in item.decorator_list] + [item.lineno])
                text = textwrap.dedent("\n".join(lines[first - 1 : item.end_lineno])) + "\n"
                out[item.name] = (first, hashlib.sha256(text.encode("utf-8")).hexdigest())
    return out


def qualified(cls: str, name: str) -> str:
    """A target's name in ``digests.json``: ``Class.method``, or a module function's own name."""
    return f"{cls}.{name}" if cls else name


def module_digests(source: str, module: str) -> dict[str, str]:
    """``Class.method`` -> digest for every target method of ``module`` found in ``source``."""
    out: dict[str, str] = {}
    for cls, names in TARGETS[module].items():
        found = methods(source, cls)
        for name in names:
            if name in found:
                out[qualified(cls, name)] = found[name][1]
    return out


def load(path: str = DIGESTS_FILE) -> dict[str, dict[str, dict[str, list[str]]]]:
    """module -> ``Class.method`` -> digest -> the releases that ship that code."""
    with open(path, encoding="utf-8") as f:
        data = json.load(f)
    modules: dict[str, dict[str, dict[str, list[str]]]] = data["modules"]
    return modules


def merge(
    into: dict[str, dict[str, dict[str, list[str]]]], more: dict[str, dict[str, dict[str, list[str]]]]
) -> dict[str, dict[str, dict[str, list[str]]]]:
    """``into`` with ``more``'s digests added (an extra file for a reviewed patched build)."""
    for module, names in more.items():
        for name, digests in names.items():
            for digest, releases in digests.items():
                into.setdefault(module, {}).setdefault(name, {}).setdefault(digest, []).extend(releases)
    return into
