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


def extract(version: str, src: Path) -> dict:
    """Every rule of the release unpacked at ``src``, each with where it is."""
    return {
        "batch_defaults": _batch_defaults(src) | _seqs_defaults(src),
        "processor_cache": _cache_type(src) | {"render": _render_cache(src), "shm": _shm(src)},
        "gpu_decode_pool": _gpu_ipc(src),
        "encoder_cache": _encoder(src),
        "limit_mm_per_prompt": _limit(src),
    }
