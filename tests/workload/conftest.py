"""Fixtures of the workload tests: functions taken from the installed transformers' source.

The Llama 4 and Kimi-K2.5 image processors import torchvision at module level, and the
torchvision wheels on PyPI are CUDA builds that do not load beside the CPU torch of the tests.
Their size rules are plain functions of (height, width), so the tests run those functions'
own source text, read from the installed transformers.
"""

from __future__ import annotations

import ast
import importlib.util
import math
from collections import defaultdict
from functools import lru_cache
from pathlib import Path

import pytest


def _functions(module: str, names: list[str]) -> dict:
    """The named top-level functions of a transformers module, compiled from its source."""
    spec = importlib.util.find_spec("transformers")
    assert spec is not None
    assert spec.origin is not None
    path = Path(spec.origin).parent.joinpath(*module.split(".")[1:]).with_suffix(".py")
    tree = ast.parse(path.read_text())
    defs = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name in names]
    assert sorted(d.name for d in defs) == sorted(names), f"{path} no longer defines {names}"
    import torch

    namespace = {"math": math, "torch": torch, "defaultdict": defaultdict, "lru_cache": lru_cache}
    exec(compile(ast.Module(body=defs, type_ignores=[]), str(path), "exec"), namespace)
    return {name: namespace[name] for name in names}


@pytest.fixture(scope="session")
def hf_functions():
    """``hf_functions(module, names)``: those functions of a transformers module, compiled from its source."""
    return _functions
