"""Child process of gen_vllm_tables.py: build one vLLM release's ``vllm serve`` parser and dump it.

Runs with ``PYTHONPATH`` on an unpacked vLLM wheel (its Python files only: building the parser
needs no compiled extension). Reads a JSON list of argvs on stdin, writes JSON on stdout: every
option of the parser ``vllm serve`` builds (``make_arg_parser``: the frontend arguments plus
``AsyncEngineArgs.add_cli_args``) and, for each argv, whether that parser accepted it (or the
message argparse exited with). Uses only the standard library besides vLLM and its dependencies.
"""

from __future__ import annotations

import argparse
import ast
import importlib
import importlib.abc
import importlib.machinery
import json
import logging
import os
import sys
import types

# Modules vLLM imports at module level although building the parser needs nothing from them.
# Stood in only when the interpreter lacks them; the dump records which were.
STAND_INS = (
    "vllm._C",
    "vllm._moe_C",
    "vllm._flashmla_C",
    "vllm.vllm_flash_attn._vllm_fa2_C",
    "vllm.vllm_flash_attn._vllm_fa3_C",
    "blake3",
    "cbor2",
    "cachetools",
    "compressed_tensors",
    "depyf",
    "diskcache",
    "einops",
    "fastapi",
    "gguf",
    "lark",
    "llguidance",
    "lm_format_enforcer",
    "mistral_common",
    "msgspec",
    "openai",
    "openai_harmony",
    "outlines_core",
    "partial_json_parser",
    "prometheus_client",
    "prometheus_fastapi_instrumentator",
    "pybase64",
    "setproctitle",
    "starlette",
    "tiktoken",
    "uvicorn",
    "uvloop",
    "watchfiles",
    "xgrammar",
    "zmq",
    "ijson",
    "anthropic",
    "model_hosting_container_standards",
    "sse_starlette",
    "python_multipart",
    "multipart",
    "aiohttp",
    "py_cpuinfo",
    "cpuinfo",
    "grpc",
    "opentelemetry",
    "nvtx",
    "pynvml",
    "psutil",
    "ninja",
    "quack",
    "tilelang",
    "cupy",
)

_MARK = "mmpool-stand-in"


class _StandIn(types.ModuleType):
    __path__: list[str] = []

    def __getattr__(self, name: str):
        if name.startswith("__"):
            raise AttributeError(name)
        return type(
            name,
            (),
            {
                "__module__": self.__name__,
                "__doc__": _MARK,
                "__getattr__": _attr,
                "__class_getitem__": classmethod(lambda cls, item: cls),
                "__init__": lambda self, *a, **k: None,
                "__call__": lambda self, *a, **k: self,
            },
        )


def _attr(self, name):  # instances of stand-in classes answer anything with another stand-in
    if name.startswith("__"):
        raise AttributeError(name)
    return _StandIn(f"{type(self).__module__}.{name}")


class _StandInFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    used: set[str] = set()

    def find_spec(self, fullname, path=None, target=None):
        hit = next((s for s in STAND_INS if fullname == s or fullname.startswith(s + ".")), None)
        if hit is None:
            return None
        for finder in sys.meta_path:
            if finder is self:
                continue
            try:
                spec = finder.find_spec(fullname, path, target) if hasattr(finder, "find_spec") else None
            except Exception:
                spec = None
            if spec is not None:
                return None
        self.used.add(hit)
        return importlib.machinery.ModuleSpec(fullname, self, is_package=True)

    def create_module(self, spec):
        return _StandIn(spec.name)

    def exec_module(self, module):
        return None


class _Refused(Exception):
    pass


def _plain(value):
    """A JSON-safe rendering of an argparse attribute (stand-ins are refused loudly)."""
    if value is None or isinstance(value, bool | int | str):
        return value
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, type | types.FunctionType | types.BuiltinFunctionType):
        text = f"{value.__module__}.{value.__qualname__}"
    elif isinstance(value, functools_partial):
        text = f"partial({_plain(value.func)})"
    else:
        text = repr(value)
        if " at 0x" in text:
            text = f"{type(value).__module__}.{type(value).__qualname__}"
    if _MARK in text or "_StandIn" in text:
        raise SystemExit(f"a stand-in module leaked into the parser: {text}")
    return text


def _type_name(value) -> str | None:
    """A stable name of an argparse ``type``: builtins by name, vLLM's helpers by qualified name."""
    if value is None:
        return None
    if value in (int, float, str, bool):
        return value.__name__
    if isinstance(value, functools_partial):
        return f"partial:{_type_name(value.func)}"
    module = getattr(value, "__module__", "") or ""
    name = getattr(value, "__qualname__", None) or type(value).__qualname__
    return f"{module}.{name}"


def _make_arg_parser_module(src: str) -> str:
    """The module ``vllm/entrypoints/cli/serve.py`` imports ``make_arg_parser`` from."""
    path = os.path.join(src, "vllm", "entrypoints", "cli", "serve.py")
    with open(path, encoding="utf-8") as f:
        tree = ast.parse(f.read())
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and any(a.name == "make_arg_parser" for a in node.names):
            assert node.module is not None
            return node.module
    raise SystemExit("vllm/entrypoints/cli/serve.py imports no make_arg_parser: teach vllm_dump.py its shape")


def main() -> int:
    probes = json.load(sys.stdin)
    finder = _StandInFinder()
    sys.meta_path.insert(0, finder)
    logging.disable(logging.CRITICAL)
    src = os.environ["PYTHONPATH"].split(os.pathsep)[0]
    module = importlib.import_module(_make_arg_parser_module(src))
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    parser = FlexibleArgumentParser(prog="vllm serve")
    parser = module.make_arg_parser(parser)

    options = []
    positionals = []
    for action in parser._actions:
        if isinstance(action, argparse._HelpAction):
            continue
        if not action.option_strings:
            positionals.append({"dest": action.dest, "nargs": _plain(action.nargs)})
            continue
        options.append(
            {
                "options": list(action.option_strings),
                "dest": action.dest,
                "action": type(action).__name__,
                "nargs": _plain(action.nargs),
                "type": _type_name(action.type),
                "choices": None if action.choices is None else sorted(_plain(list(action.choices)), key=str),
                "default": _plain(action.default),
                "required": bool(action.required),
                "is_store_true": isinstance(action, argparse._StoreTrueAction),
                "is_bool_optional": isinstance(action, argparse.BooleanOptionalAction),
            }
        )

    def refuse(message):
        raise _Refused(message)

    parser.error = refuse
    outcomes = []
    for argv in probes:
        try:
            ns = parser.parse_args(argv)
        except _Refused as exc:
            outcomes.append({"error": str(exc)})
        except SystemExit as exc:  # an action that exits by itself
            outcomes.append({"error": f"exit {exc.code}"})
        except Exception as exc:  # a type converter that raises something argparse does not catch
            outcomes.append({"error": f"{type(exc).__name__}: {exc}"})
        else:
            outcomes.append({"namespace": {k: _plain(v) for k, v in sorted(vars(ns).items()) if k in _WATCH}})
    json.dump(
        {
            "module": module.__name__,
            "options": options,
            "positionals": positionals,
            "outcomes": outcomes,
            "stand_ins": sorted(finder.used),
        },
        sys.stdout,
    )
    return 0


# the parsed values the probes record (the multimodal memory and parallel layout flags)
_WATCH = frozenset(
    {
        "model",
        "model_tag",
        "mm_processor_cache_gb",
        "mm_processor_cache_type",
        "mm_ipc_gpu_memory_gb",
        "mm_shm_cache_max_object_size_mb",
        "limit_mm_per_prompt",
        "max_num_batched_tokens",
        "max_model_len",
        "data_parallel_size",
        "data_parallel_size_local",
        "data_parallel_rank",
        "data_parallel_external_lb",
        "data_parallel_hybrid_lb",
        "api_server_count",
        "tensor_parallel_size",
        "performance_mode",
    }
)

from functools import partial as functools_partial  # noqa: E402

if __name__ == "__main__":
    raise SystemExit(main())
