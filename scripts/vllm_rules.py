"""Read the multimodal memory rules of one vLLM release from its source, without importing it.

Used by gen_vllm_tables.py. Each rule is found by the shape of the code that implements it; a
shape this module does not know stops the generator with the file it could not read, so a
release that changes a rule is never tabulated with the old one.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path


class UnknownShape(SystemExit):
    pass


def _read(src: Path, rel: str) -> str:
    path = src / "vllm" / rel
    if not path.is_file():
        raise UnknownShape(f"{path}: missing; teach scripts/vllm_rules.py where this release keeps it")
    return path.read_text(encoding="utf-8")


def _line(text: str, needle: str) -> int:
    return text[: text.index(needle)].count("\n") + 1


def _need(text: str, pattern: str, where: str) -> re.Match[str]:
    m = re.search(pattern, text, re.S)
    if m is None:
        raise UnknownShape(f"{where}: no {pattern!r}; teach scripts/vllm_rules.py this release's shape")
    return m


def _batch_defaults(src: Path) -> dict:
    """The ``max_num_batched_tokens`` defaults of ``EngineArgs.get_batch_defaults`` by GPU tier."""
    rel = "engine/arg_utils.py"
    text = _read(src, rel)
    tree = ast.parse(text)
    fn = next((n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == "get_batch_defaults"), None)
    if fn is None:
        raise UnknownShape(f"{rel}: no get_batch_defaults")

    def usage(node: ast.stmt) -> dict[str, int] | None:
        if not (isinstance(node, ast.AnnAssign | ast.Assign) and isinstance(node.value, ast.Dict)):
            return None
        target = node.target if isinstance(node, ast.AnnAssign) else node.targets[0]
        if not (isinstance(target, ast.Name) and target.id == "default_max_num_batched_tokens"):
            return None
        out = {}
        for k, v in zip(node.value.keys, node.value.values, strict=True):
            if not (isinstance(k, ast.Attribute) and isinstance(v, ast.Constant) and isinstance(v.value, int)):
                raise UnknownShape(f"{rel}:{node.lineno}: a batch default that is not a constant")
            out[k.attr] = v.value
        return out

    def condition(test: ast.expr) -> dict:
        parts = test.values if isinstance(test, ast.BoolOp) and isinstance(test.op, ast.And) else [test]
        cond: dict = {"min_memory_gib": None, "excluded_names": [], "excludes_gb10": False}
        for p in parts:
            s = ast.unparse(p)
            if m := re.fullmatch(r"device_memory >= (\d+) \* GiB_bytes", s):
                cond["min_memory_gib"] = int(m.group(1))
            elif m := re.fullmatch(r"'([a-z0-9]+)' not in device_name", s):
                cond["excluded_names"].append(m.group(1))
            elif s == "not is_gb10":
                cond["excludes_gb10"] = True
            else:
                raise UnknownShape(f"{rel}:{p.lineno}: unknown batch-default condition {s!r}")
        return cond

    tiers = []
    node: ast.stmt | None = next(
        (n for n in fn.body if isinstance(n, ast.If) and "device_memory" in ast.unparse(n.test)), None
    )
    if node is None:
        raise UnknownShape(f"{rel}: get_batch_defaults has no device-memory tiers")
    at = node.lineno
    while isinstance(node, ast.If):
        values = next((u for u in map(usage, node.body) if u), None)
        if values is None:
            raise UnknownShape(f"{rel}:{node.lineno}: a tier without batch defaults")
        tiers.append(condition(node.test) | {"server": values["OPENAI_API_SERVER"], "offline": values["LLM_CLASS"]})
        orelse = node.orelse
        if len(orelse) == 1 and isinstance(orelse[0], ast.If):
            node = orelse[0]
            continue
        values = next((u for u in map(usage, orelse) if u), None)
        if values is None:
            raise UnknownShape(f"{rel}:{node.lineno}: no fallback batch defaults")
        tiers.append(
            {"min_memory_gib": None, "excluded_names": [], "excludes_gb10": False}
            | {"server": values["OPENAI_API_SERVER"], "offline": values["LLM_CLASS"]}
        )
        node = None
    gb10 = "is_device_capability((12, 1))" in ast.unparse(fn)
    doubling = _need(
        text,
        r'self\.performance_mode == "throughput":\s+if orig_max_num_batched_tokens is None:\s+'
        r"self\.max_num_batched_tokens \*= 2",
        rel,
    )
    clamp = _need(
        text, r"self\.max_num_batched_tokens = min\(\s+self\.max_num_seqs \* model_config\.max_model_len,", rel
    )
    return {
        "tiers": tiers,
        "gb10_capability": [12, 1] if gb10 else None,
        "throughput_doubles": True,
        "clamped_to_seqs_times_len": True,
        "at": f"{rel}:{at}",
        "doubling_at": f"{rel}:{text[: doubling.start()].count(chr(10)) + 1}",
        "clamp_at": f"{rel}:{text[: clamp.start()].count(chr(10)) + 1}",
    }


def _seqs_defaults(src: Path) -> dict:
    """``max_num_seqs`` defaults per tier (they bound the default token budget)."""
    rel = "engine/arg_utils.py"
    text = _read(src, rel)
    fn = text[text.index("def get_batch_defaults") :]
    fn = fn[: fn.index("\n    def ", 10)]
    seqs = [
        int(m.group(1))
        for m in re.finditer(
            r"default_max_num_seqs = \{\s+UsageContext\.LLM_CLASS: \d+,\s+"
            r"UsageContext\.OPENAI_API_SERVER: (\d+),",
            fn,
        )
    ]
    if not seqs:
        raise UnknownShape(f"{rel}: no max_num_seqs defaults")
    return {"server_seqs": seqs}


def _cache_type(src: Path) -> dict:
    for rel in ("multimodal/cache/factories.py", "multimodal/registry.py"):
        path = src / "vllm" / rel
        if path.is_file() and "def _get_cache_type" in (text := path.read_text(encoding="utf-8")):
            _need(
                text,
                r"is_ipc_supported = parallel_config\._api_process_count == 1 and \(\s+"
                r"parallel_config\.data_parallel_size == 1\s+or parallel_config\.data_parallel_external_lb\s+\)",
                rel,
            )
            _need(text, r"if mm_config\.mm_processor_cache_gb <= 0:\s+return None", rel)
            return {
                "rule": "ipc-needs-one-api-process-and-dp1-or-external-lb",
                "at": f"{rel}:{_line(text, 'def _get_cache_type')}",
            }
    raise UnknownShape("no _get_cache_type in multimodal/cache/factories.py or multimodal/registry.py")


def _render_cache(src: Path) -> dict:
    for rel in ("renderers/base.py", "renderers/registry.py"):
        path = src / "vllm" / rel
        if not path.is_file():
            continue
        text = path.read_text(encoding="utf-8")
        for needle in (
            "processor_only_cache_from_config(config)",
            "mm_registry.processor_only_cache_from_config(config)",
        ):
            if needle in text:
                return {"render_only_cache": True, "at": f"{rel}:{_line(text, needle)}"}
    raise UnknownShape("renderers/base.py builds no processor-only cache; teach scripts/vllm_rules.py")


def _shm(src: Path) -> dict:
    rel = "distributed/device_communicators/shm_object_storage.py"
    text = _read(src, rel)
    m = re.search(r"self\.AUTH_SECRET_BYTES = (\d+)\s+self\.DATA_OFFSET = self\.AUTH_SECRET_BYTES", text)
    if m:
        _need(text, r"size=self\.data_buffer_size \+ self\.DATA_OFFSET", rel)
        offset, at = int(m.group(1)), _line(text, "self.AUTH_SECRET_BYTES =")
    else:
        _need(text, r"SharedMemory\(\s+create=True, size=self\.data_buffer_size, name=name", rel)
        offset, at = 0, _line(text, "create=True, size=self.data_buffer_size")
    sender_rel = (
        "multimodal/cache/shm.py" if (src / "vllm/multimodal/cache/shm.py").is_file() else "multimodal/cache.py"
    )
    sender = _read(src, sender_rel)
    _need(sender, r"data_buffer_size=int\(mm_config\.mm_processor_cache_gb \* GiB_bytes\)", sender_rel)
    return {"extra_bytes": offset, "at": f"{rel}:{at}"}


def _gpu_ipc(src: Path) -> dict | None:
    rel = "multimodal/gpu_ipc_memory.py"
    path = src / "vllm" / rel
    if not path.is_file():
        return None
    text = path.read_text(encoding="utf-8")
    split = "total_bytes = int(mm_ipc_gpu_memory_gb * GiB_bytes) // api_process_count"
    _need(text, re.escape(split), rel)
    _need(
        text, r"if total_bytes <= 0:\s+raise ValueError\(f\"total_bytes must be positive, got \{total_bytes\}\"\)", rel
    )
    _need(text, r"if nbytes > self\._total_bytes:", rel)
    reserve = _need(text, r"raw_frame_reserved_bytes = int\(mm_config\.mm_ipc_gpu_memory_gb \* GiB_bytes\)", rel)
    return {
        "split_at": f"{rel}:{_line(text, split)}",
        "reserve_at": f"{rel}:{text[: reserve.start()].count(chr(10)) + 1}",
    }


def _encoder(src: Path) -> dict:
    rel = "v1/core/encoder_cache_manager.py"
    text = _read(src, rel)
    m = _need(
        text, r"encoder_cache_size = max\(\s+scheduler_config\.encoder_cache_size, max_tokens_per_mm_item\s+\)", rel
    )
    sched = _read(src, "config/scheduler.py")
    _need(sched, r"self\.encoder_cache_size = self\.max_num_batched_tokens", "config/scheduler.py")
    return {
        "rule": "max(max_num_batched_tokens, max_tokens_per_item)",
        "at": f"{rel}:{text[: m.start()].count(chr(10)) + 1}",
    }


def _limit(src: Path) -> dict:
    rel = "config/multimodal.py"
    text = _read(src, rel)
    m = _need(text, r"if limit_data is None:\s+# Unspecified modality is set to (\d+) by default\s+return (\d+)", rel)
    return {"default": int(m.group(2)), "at": f"{rel}:{text[: m.start()].count(chr(10)) + 1}"}


# mmpool's families -> the model class vLLM builds for their checkpoints (model_executor/models/<file>.py)
FAMILY_CLASSES = {
    "qwen2-vl": ("qwen2_vl", "Qwen2VLForConditionalGeneration"),
    "qwen2.5-vl": ("qwen2_5_vl", "Qwen2_5_VLForConditionalGeneration"),
    "qwen3-vl": ("qwen3_vl", "Qwen3VLForConditionalGeneration"),
    "gemma3": ("gemma3_mm", "Gemma3ForConditionalGeneration"),
    "llama4": ("mllama4", "Llama4ForConditionalGeneration"),
    "kimi-k2.5": ("kimi_k25", "KimiK25ForConditionalGeneration"),
    "kimi-vl": ("kimi_vl", "KimiVLForConditionalGeneration"),
    "internvl": ("internvl", "InternVLChatModel"),
    "llava-onevision": ("llava_onevision", "LlavaOnevisionForConditionalGeneration"),
    "minicpm-v": ("minicpmv", "MiniCPMV"),
}


def _class_sets_flag(text: str, name: str, rel: str) -> bool:
    """Whether class ``name``'s own body sets ``supports_mm_device_do_normalize = True`` (False where it
    does not, or sets it False; the interface's default is False)."""
    tree = ast.parse(text)
    cls = next((n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == name), None)
    if cls is None:
        raise UnknownShape(f"{rel}: no class {name}; teach scripts/vllm_rules.py this release's model class")
    for node in cls.body:
        target = (
            node.target
            if isinstance(node, ast.AnnAssign)
            else (node.targets[0] if isinstance(node, ast.Assign) else None)
        )
        if isinstance(target, ast.Name) and target.id == "supports_mm_device_do_normalize":
            value = node.value
            if not (isinstance(value, ast.Constant) and isinstance(value.value, bool)):
                raise UnknownShape(f"{rel}:{node.lineno}: a support flag that is not a constant")
            return value.value
    return False


def _device_normalize(src: Path) -> dict:
    """``--mm-device-do-normalize``: its CLI default, how None resolves (the model class's support
    flag), what it does to the HF processor's kwargs, the processing context's cast of floating
    tensors to the model dtype, and which families' model classes support it."""
    args_rel, model_rel, mm_rel, ctx_rel = (
        "engine/arg_utils.py",
        "config/model.py",
        "config/multimodal.py",
        "multimodal/processing/context.py",
    )
    args = _read(src, args_rel)
    flag = _need(
        args,
        r'"--mm-device-do-normalize",\s+\*\*\{\s+\*\*multimodal_kwargs\["mm_device_do_normalize"\],'
        r'\s+"default": None,',
        args_rel,
    )
    model = _read(src, model_rel)
    resolve = _need(
        model,
        r"if mm_device_do_normalize is None:.*?mm_device_do_normalize = \(\s+"
        r"self\._model_info\.supports_mm_device_do_normalize",
        model_rel,
    )
    _need(
        model,
        r"mm_device_do_normalize\s+and not self\._model_info\.supports_mm_device_do_normalize\s+\):"
        r".*?mm_device_do_normalize = False",
        model_rel,
    )
    mm = _read(src, mm_rel)
    merge = _need(
        mm,
        r"if self\.mm_device_do_normalize:\s+(?:kwargs\[\"do_normalize\"\] = False\s+"
        r"kwargs\[\"do_rescale\"\] = False|.*?for key in \(\"do_normalize\", \"do_rescale\"\):"
        r".*?merged\[key\] = False)",
        mm_rel,
    )
    ctx = _read(src, ctx_rel)
    cast = _need(
        ctx, r"if tensor\.is_floating_point\(\):\s+tensor = tensor\.to\(dtype=self\.model_config\.dtype\)", ctx_rel
    )
    families, family_at = {}, {}
    for fam, (module, cls) in FAMILY_CLASSES.items():
        rel = f"model_executor/models/{module}.py"
        text = _read(src, rel)
        families[fam] = _class_sets_flag(text, cls, rel)
        family_at[fam] = f"{rel}:{_line(text, 'class ' + cls)}"

    def at(rel: str, text: str, m: re.Match[str]) -> str:
        return f"{rel}:{text[: m.start()].count(chr(10)) + 1}"

    return {
        "cli_default": None,
        "rule": "none-is-the-model-class-support-flag; unsupported-forced-off; on-skips-rescale-and-normalize; "
        "floating-tensors-cast-to-model-dtype",
        "supported": families,
        "at": at(args_rel, args, flag),
        "resolve_at": at(model_rel, model, resolve),
        "merge_at": at(mm_rel, mm, merge),
        "cast_at": at(ctx_rel, ctx, cast),
        "family_at": family_at,
    }


def extract(version: str, src: Path) -> dict:
    """Every rule of the release unpacked at ``src``, each with where it is."""
    return {
        "batch_defaults": _batch_defaults(src) | _seqs_defaults(src),
        "processor_cache": _cache_type(src) | {"render": _render_cache(src), "shm": _shm(src)},
        "gpu_decode_pool": _gpu_ipc(src),
        "encoder_cache": _encoder(src),
        "limit_mm_per_prompt": _limit(src),
        "mm_device_do_normalize": _device_normalize(src),
    }
