"""How the budget from ``--size`` travels through the layers on ``mmpool plan``: a call trace.

Runs ``mmpool plan --size 1GB --format json`` in-process under ``sys.setprofile`` and follows
every call of a function of mmpool's whose arguments carry the budget (the text ``1GB``, its
1 000 000 000 bytes, or a request, budget or plan holding them). It prints the path (layer by
layer), the files it passes through and two figures: calls back up (a call from a lower layer
into a higher one, e.g. core calling back into an engine) and returns to a file already left.
ARCHITECTURE.md quotes the first; the stack allows at most 5.

    python scripts/trace_budget.py [--verbose]
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import os
import sys
from pathlib import Path
from types import FrameType
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

TEXT, BYTES = "1GB", 1_000_000_000
# top to bottom, as the import-linter contract in pyproject.toml has them
LAYERS = [
    ("cli",),
    ("usecases", "render"),
    ("probe",),
    ("engines",),
    ("inputs",),
    ("simulate", "workload"),
    ("core",),
    ("errors",),
]
RANK = {name: len(LAYERS) - i for i, names in enumerate(LAYERS) for name in names}


def layer(module: str) -> str | None:
    parts = module.split(".")
    if parts[0] != "mmpool_cli" or len(parts) < 2:
        return None
    return parts[1] if parts[1] in RANK else None


def carries(value: Any, depth: int = 0) -> bool:
    """Whether ``value`` is the budget, or holds it (a request, a budget, a plan, options)."""
    if isinstance(value, bool):
        return False
    if value == TEXT or (isinstance(value, int) and value == BYTES):
        return True
    if depth < 2 and dataclasses.is_dataclass(value) and not isinstance(value, type):
        return any(carries(getattr(value, f.name, None), depth + 1) for f in dataclasses.fields(value))
    return False


def main() -> int:
    from mmpool_cli.cli import main as mmpool

    verbose = "--verbose" in sys.argv
    path: list[tuple[str, str, str]] = []  # (layer, file, function) of each carrying call
    ups = 0
    calls_up: list[str] = []

    def profile(frame: FrameType, event: str, arg: object) -> None:
        nonlocal ups
        if event != "call":
            return
        module = frame.f_globals.get("__name__", "")
        here = layer(module)
        if here is None:
            return
        code = frame.f_code
        args = [frame.f_locals.get(n) for n in code.co_varnames[: code.co_argcount + code.co_kwonlyargcount]]
        if not any(carries(a) for a in args):
            return
        caller = frame.f_back
        there = layer(caller.f_globals.get("__name__", "")) if caller is not None else None
        if there is not None and RANK[here] > RANK[there]:
            ups += 1
            calls_up.append(f"{there} -> {here}: {module}.{code.co_name}")
        path.append((here, os.path.relpath(code.co_filename, ROOT), code.co_name))

    env = {k: v for k, v in os.environ.items() if not k.startswith(("SGLANG_", "SGL_", "MMPOOL_"))}
    saved = dict(os.environ)
    os.environ.clear()
    os.environ.update(env)
    try:
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            sys.setprofile(profile)
            try:
                code = mmpool(["plan", "--size", TEXT, "--format", "json"])
            finally:
                sys.setprofile(None)
    finally:
        os.environ.clear()
        os.environ.update(saved)
    assert code == 0, code

    layers: list[str] = []
    for here, _, _ in path:
        if not layers or layers[-1] != here:
            layers.append(here)
    files: list[str] = []
    returns = 0
    for _, file, _ in path:
        if files and files[-1] == file:
            continue
        if file in files:
            returns += 1
        files.append(file)
    print("path:", " -> ".join(layers))
    print(f"files: {len(set(files))}")
    if verbose:
        for here, file, function in path:
            print(f"  {here:9} {file}:{function}")
        for line in calls_up:
            print("  up:", line)
    print(f"calls back up into a layer it left: {ups}")
    print(f"returns to a file already left: {returns}")
    return 0 if ups <= 5 else 1


if __name__ == "__main__":
    sys.exit(main())
