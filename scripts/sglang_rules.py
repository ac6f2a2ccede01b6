"""Read one SGLang wheel's multimodal pool rules from its source, without importing it.

Used by gen_sglang_tables.py. Every fact is found by parsing the source (``ast``) and recorded
with the file and line it came from. A shape this module does not know stops the generator with
a message naming the file: mmpool's rules (``mmpool_cli/engines/sglang/versions.py``) must then be taught
the new shape by hand before the tables are regenerated.
"""

from __future__ import annotations

import ast
from pathlib import Path

ENV_NAMES = (
    "SGLANG_MM_FEATURE_CACHE_MB",
    "SGLANG_VLM_CACHE_SIZE_MB",
    "SGLANG_MM_ITEM_MEM_POOL_RECYCLE_INTERVAL_SEC",
    "SGLANG_USE_CUDA_IPC_TRANSPORT",
    "SGLANG_USE_IPC_POOL_HANDLE_CACHE",
)


class UnknownShape(SystemExit):
    """The source has a shape the generator cannot map onto mmpool's rules."""

    def __init__(self, version: str, where: str, what: str) -> None:
        super().__init__(f"SGLang {version}, {where}: {what}; teach scripts/sglang_rules.py and versions.py")


def _const(node: ast.AST):
    """A literal, allowing integer arithmetic like ``4 * 1024`` (as SGLang writes its defaults)."""
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mult | ast.Add | ast.FloorDiv):
        left, right = _const(node.left), _const(node.right)
        if isinstance(node.op, ast.Mult):
            return left * right
        if isinstance(node.op, ast.Add):
            return left + right
        return left // right
    return ast.literal_eval(node)


def _where(root: Path, path: Path, node: ast.AST) -> str:
    return f"{path.relative_to(root / 'sglang' / 'srt')}:{node.lineno}"


def _parse(path: Path) -> ast.Module:
    return ast.parse(path.read_text(encoding="utf-8"), filename=str(path))


def _env_defaults(version: str, root: Path) -> dict[str, dict]:
    path = root / "sglang" / "srt" / "environ.py"
    found: dict[str, dict] = {}
    for node in ast.walk(_parse(path)):
        if not (isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name)):
            continue
        name = node.targets[0].id
        if name in ENV_NAMES and isinstance(node.value, ast.Call) and isinstance(node.value.func, ast.Name):
            kind = node.value.func.id
            if kind not in ("EnvInt", "EnvBool", "EnvFloat") or len(node.value.args) != 1:
                raise UnknownShape(version, _where(root, path, node), f"{name} is {ast.unparse(node.value)}")
            found[name] = {"kind": kind, "default": _const(node.value.args[0]), "at": _where(root, path, node)}
    missing = [n for n in ("SGLANG_MM_FEATURE_CACHE_MB", "SGLANG_USE_CUDA_IPC_TRANSPORT") if n not in found]
    if missing:
        raise UnknownShape(version, "environ.py", f"no EnvX definition of {missing}")
    return found


def _pool_class(version: str, root: Path) -> tuple[Path, ast.ClassDef]:
    hits = []
    for path in sorted((root / "sglang" / "srt").rglob("*.py")):
        text = path.read_text(encoding="utf-8")
        if "class MmItemMemoryPool" in text:
            for node in ast.walk(_parse(path)):
                if isinstance(node, ast.ClassDef) and node.name == "MmItemMemoryPool":
                    hits.append((path, node))
    if len(hits) != 1:
        raise UnknownShape(version, "sglang/srt", f"{len(hits)} definitions of class MmItemMemoryPool")
    return hits[0]


def _pool_facts(version: str, root: Path) -> dict:
    path, cls = _pool_class(version, root)
    init = next((n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name == "__init__"), None)
    if init is None:
        raise UnknownShape(version, _where(root, path, cls), "MmItemMemoryPool has no __init__")
    params = [a.arg for a in init.args.args[1:]]
    empty = [n for n in ast.walk(init) if isinstance(n, ast.Call) and ast.unparse(n.func) == "torch.empty" and n.args]
    if len(empty) != 1:
        raise UnknownShape(version, _where(root, path, init), "MmItemMemoryPool.__init__ has no single torch.empty")
    kw = {k.arg: ast.unparse(k.value) for k in empty[0].keywords}
    device = kw.get("device")
    if device == "'cuda'":
        device_rule = "current"
    elif device == "f'cuda:{base_gpu_id}'":
        device_rule = "base_gpu_id"
    else:
        raise UnknownShape(version, _where(root, path, empty[0]), f"pool device {device!r}")
    source = path.read_text(encoding="utf-8")
    transport_dir = root / "sglang" / "srt" / "multimodal" / "transport"
    if "ShmSyncBuffer" in source and "consumer_count" not in params:
        kind, constants = "shm", None
    elif "consumer_count" in params and (transport_dir / "memory_pool.py").exists():
        kind, constants = "stream-ordered", _header_constants(version, root, transport_dir / "memory_pool.py")
    else:
        raise UnknownShape(version, _where(root, path, cls), f"pool class with parameters {params}")
    return {
        "kind": kind,
        "params": params,
        "device": device_rule,
        "dtype": kw.get("dtype"),
        "at": _where(root, path, empty[0]),
        "constants": constants,
    }


def _header_constants(version: str, root: Path, path: Path) -> dict:
    wanted = ("CONTROL_WORD_BYTES", "DATA_ALIGNMENT", "DEFAULT_MAX_INFLIGHT_SLICES")
    tree = _parse(path)
    out = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name) and node.targets[0].id in wanted:
            out[node.targets[0].id] = _const(node.value)
    if set(out) != set(wanted):
        raise UnknownShape(version, str(path.name), f"header constants {sorted(out)}, expected {list(wanted)}")
    text = path.read_text(encoding="utf-8")
    # The header mmpool computes: align_up(slots * (1 + C) * 4, 256); check both halves are there.
    if "self.control_words_per_slot = 1 + consumer_count" not in text or (
        "self.data_start = align_up(control_bytes, DATA_ALIGNMENT)" not in text
    ):
        raise UnknownShape(version, str(path.name), "the control header is not (1 + consumer_count) words per slot")
    out["at"] = f"{path.relative_to(root / 'sglang' / 'srt')}"
    return out


def _pool_call(version: str, root: Path) -> tuple[Path, ast.Call, ast.FunctionDef]:
    path = root / "sglang" / "srt" / "multimodal" / "processors" / "base_processor.py"
    tree = _parse(path)
    for fn in ast.walk(tree):
        if not isinstance(fn, ast.FunctionDef):
            continue
        calls = [n for n in ast.walk(fn) if isinstance(n, ast.Call) and ast.unparse(n.func) == "MmItemMemoryPool"]
        if calls:
            if len(calls) != 1:
                raise UnknownShape(version, _where(root, path, fn), "several MmItemMemoryPool(...) calls")
            return path, calls[0], fn
    raise UnknownShape(version, "multimodal/processors/base_processor.py", "no MmItemMemoryPool(...) call")


def _split_facts(version: str, root: Path) -> dict:
    path, call, fn = _pool_call(version, root)
    size = ast.unparse(call.args[0])
    assigns = [
        n
        for n in ast.walk(fn)
        if isinstance(n, ast.Assign) and any(isinstance(t, ast.Name) and t.id == size for t in n.targets)
    ]
    consumer_arg = ast.unparse(call.args[3]) if len(call.args) > 3 else None
    if consumer_arg is None:
        consumers = "tp (shm counter)"
    elif consumer_arg == "self.server_args.tp_size":
        consumers = "tp"
    elif consumer_arg == "get_mm_feature_consumer_count()":
        consumers = _consumer_count_rule(version, root)
    else:
        raise UnknownShape(version, _where(root, path, call), f"consumer count {consumer_arg}")
    facts = {"pool_call_at": _where(root, path, call), "consumers": consumers}
    if size == "MM_FEATURE_CACHE_SIZE" and not assigns:
        return facts | {"split": "none"}
    if len(assigns) != 1:
        raise UnknownShape(version, _where(root, path, call), f"pool size {size} assigned {len(assigns)} times")
    value = assigns[0].value
    text = ast.unparse(value)
    if isinstance(value, ast.Call) and ast.unparse(value.func) == "max" and len(value.args) == 2:
        share, floor = value.args
        if ast.unparse(share) != "MM_FEATURE_CACHE_SIZE // worker_num":
            raise UnknownShape(version, _where(root, path, value), f"split {text}")
        return facts | {"split": "floor", "floor_bytes": _const(floor), "split_at": _where(root, path, value)}
    if isinstance(value, ast.Call) and ast.unparse(value.func) == "get_mm_feature_pool_size_per_worker":
        return facts | {"split": "exact", "split_at": _split_function(version, root)}
    raise UnknownShape(version, _where(root, path, value), f"split {text}")


def _split_function(version: str, root: Path) -> str:
    for path in sorted((root / "sglang" / "srt").rglob("*.py")):
        if "def get_mm_feature_pool_size_per_worker" not in path.read_text(encoding="utf-8"):
            continue
        for fn in ast.walk(_parse(path)):
            if isinstance(fn, ast.FunctionDef) and fn.name == "get_mm_feature_pool_size_per_worker":
                returns = [ast.unparse(n.value) for n in ast.walk(fn) if isinstance(n, ast.Return)]
                if returns != ["total_pool_size // tokenizer_worker_num"]:
                    raise UnknownShape(version, _where(root, path, fn), f"split function returns {returns}")
                return _where(root, path, fn)
    raise UnknownShape(version, "sglang/srt", "get_mm_feature_pool_size_per_worker is called but not defined")


def _consumer_count_rule(version: str, root: Path) -> str:
    path = root / "sglang" / "srt" / "multimodal" / "transport" / "memory_pool.py"
    for fn in ast.walk(_parse(path)):
        if isinstance(fn, ast.FunctionDef) and fn.name == "get_mm_feature_consumer_count":
            body = ast.unparse(fn)
            if "if parallel.attn_dp_enabled:" in body and "return parallel.tp_size // parallel.num_dp_ranks" in body:
                return "tp // dp-ranks under attention DP"
            raise UnknownShape(version, _where(root, path, fn), "get_mm_feature_consumer_count body")
    raise UnknownShape(version, "multimodal/transport/memory_pool.py", "no get_mm_feature_consumer_count")


def _transport_policy(version: str, root: Path, has_flag: bool) -> dict:
    if not has_flag:
        return {"policy": "env"}
    srt = root / "sglang" / "srt"
    for path in (srt / "arg_groups" / "serving_hook.py", srt / "server_args.py"):
        if not path.exists():
            continue
        for fn in ast.walk(_parse(path)):
            if isinstance(fn, ast.FunctionDef) and fn.name.lstrip("_") == "handle_multimodal_feature_transport":
                body = ast.unparse(fn)
                at = _where(root, path, fn)
                auto_ipc = "auto-resolved to cuda_ipc" in body
                single_cpu = "nnodes == 1:\n" in body and "auto-resolved to cuda_vmm" in body
                if auto_ipc and not single_cpu:
                    return {"policy": "auto-cuda_ipc-single-node", "at": at}
                if single_cpu and not auto_ipc:
                    return {"policy": "cpu-single-node", "at": at}
                if not auto_ipc and "auto-resolved" not in body:
                    return {"policy": "opt-in", "at": at}
                raise UnknownShape(version, at, "an unknown default policy for --mm-feature-transport")
    raise UnknownShape(version, "sglang/srt", "--mm-feature-transport but no handle_multimodal_feature_transport")


def _kv_reservation(version: str, root: Path) -> dict | None:
    path = root / "sglang" / "srt" / "mem_cache" / "kv_cache_configurator.py"
    if not path.exists():
        return None
    for fn in ast.walk(_parse(path)):
        if isinstance(fn, ast.FunctionDef) and fn.name == "mm_runtime_reservation_gb":
            compares = [
                _const(n.comparators[0])
                for n in ast.walk(fn)
                if isinstance(n, ast.Compare)
                and ast.unparse(n.left) == "mm_feature_transport"
                and isinstance(n.ops[0], ast.In)
            ]
            body = ast.unparse(fn)
            if len(compares) != 1 or "envs.SGLANG_VLM_CACHE_SIZE_MB.get()" not in body:
                raise UnknownShape(version, _where(root, path, fn), "mm_runtime_reservation_gb body")
            return {"budget_for": sorted(compares[0]), "at": _where(root, path, fn)}
    return None


def config_merger(version: str, root: Path) -> dict:
    """Which YAML keys SGLang's ``--config`` merger refuses: by ``dest``, or by every long spelling."""
    srt = root / "sglang" / "srt"
    candidates = (srt / "server_args_config_parser.py", srt / "utils" / "server_args_config_parser.py")
    paths = [p for p in candidates if p.exists()]
    if len(paths) != 1:
        raise UnknownShape(version, "sglang/srt", f"{len(paths)} server_args_config_parser.py files")
    text = paths[0].read_text(encoding="utf-8")
    at = str(paths[0].relative_to(srt))
    spellings = "isinstance(a, argparse._StoreTrueAction) or _takes_one_value(a)"
    if "for key in _config_keys(a)" in text and spellings in text:
        return {"keys": "spellings", "at": at}
    if "a.dest: a" in text and "and not isinstance(a, argparse._StoreAction)" in text:
        return {"keys": "dest", "at": at}
    raise UnknownShape(version, at, "an unknown rule for unsupported --config keys")


def qwen3_vl_override(version: str, root: Path) -> dict | None:
    """Whether the Qwen3-VL model override picks cuda_ipc (and raises the budget to 3072 MiB) itself."""
    path = root / "sglang" / "srt" / "arg_groups" / "model_overrides" / "qwen3_vl.py"
    if not path.exists():
        return None
    text = path.read_text(encoding="utf-8")
    if "mm_feature_transport" not in text:
        return None
    if 'updates["mm_feature_transport"] = "cuda_ipc"' in text and "SGLANG_MM_FEATURE_CACHE_MB.set(3 * 1024)" in text:
        return {"transport": "cuda_ipc", "budget_mb": 3 * 1024, "at": str(path.relative_to(root / "sglang" / "srt"))}
    raise UnknownShape(version, str(path.name), "an unknown Qwen3-VL transport override")


def extract(version: str, root: Path, has_transport_flag: bool, transport_choices: list[str] | None) -> dict:
    """The pool facts of the SGLang wheel unpacked at ``root``, each with where it was read."""
    pos = root / "sglang" / "srt" / "managers" / "positional_embeds_transport.py"
    return {
        "env": _env_defaults(version, root),
        "pool": _pool_facts(version, root),
        **_split_facts(version, root),
        "transport": {"choices": transport_choices, **_transport_policy(version, root, has_transport_flag)},
        "kv_reservation": _kv_reservation(version, root),
        "positional_pool": "managers/positional_embeds_transport.py" if pos.exists() else None,
        "config_merger": config_merger(version, root),
        "qwen3_vl_override": qwen3_vl_override(version, root),
    }
