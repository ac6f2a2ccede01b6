"""The package's own import graph: no module imports itself back through others, and modules stay small.

``lint-imports`` keeps the layers in order; within a layer, two modules that import each other (even
lazily, inside a function) are a cycle too, and this test finds every one with grimp, which
import-linter builds its graph with. The recording hook (``_record/mmpool_record``) imports itself by
its own top-level name, as the server's Python loads it: its graph is walked as a package of its own.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

grimp = pytest.importorskip("grimp", reason="grimp comes with import-linter (the test extra)")

PACKAGE = Path(__file__).resolve().parent.parent / "mmpool_cli"
HOOK_DIR = PACKAGE / "_record"
MAX_LINES = 400


def _cycles(package: str = "mmpool_cli") -> list[list[str]]:
    """Every strongly connected set of two or more modules of the package's import graph (Tarjan's)."""
    graph = grimp.build_graph(package, include_external_packages=False, cache_dir=None)
    edges = {m: sorted(graph.find_modules_directly_imported_by(m)) for m in sorted(graph.modules)}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(start: str) -> None:  # iterative: the graph is deep enough to matter for recursion
        work = [(start, iter(edges.get(start, ())))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(edges.get(child, ()))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                part = []
                while True:
                    m = stack.pop()
                    on_stack.discard(m)
                    part.append(m)
                    if m == node:
                        break
                if len(part) > 1:
                    found.append(sorted(part))

    for module in edges:
        if module not in index:
            visit(module)
    return sorted(found)


def test_no_module_of_the_package_imports_itself_back() -> None:
    assert _cycles() == []


def test_no_module_of_the_recording_hook_imports_itself_back(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(HOOK_DIR))
    monkeypatch.delitem(sys.modules, "mmpool_record", raising=False)
    graph = grimp.build_graph("mmpool_record", include_external_packages=False, cache_dir=None)
    assert "mmpool_record.recorder" in graph.modules and "mmpool_record.follow" in graph.modules  # walked
    assert _cycles("mmpool_record") == []


def test_every_module_is_at_most_400_lines() -> None:
    sizes = {str(p.relative_to(PACKAGE)): len(p.read_text().splitlines()) for p in PACKAGE.rglob("*.py")}
    over = {name: n for name, n in sizes.items() if n > MAX_LINES}
    assert over == {}


# What each model of memory may reach, directly or through others: the traces are below the pools and
# the caches, which know neither each other nor an engine (ARCHITECTURE.md; lint-imports states the same).
MODELS_MUST_NOT_REACH = {
    "mmpool_cli.traces": ("mmpool_cli.pools", "mmpool_cli.caches", "mmpool_cli.engines"),
    "mmpool_cli.pools": ("mmpool_cli.caches", "mmpool_cli.engines"),
    "mmpool_cli.caches": ("mmpool_cli.pools", "mmpool_cli.engines"),
    "mmpool_cli.kernels": ("mmpool_cli.traces", "mmpool_cli.pools", "mmpool_cli.caches", "mmpool_cli.engines"),
}


@pytest.mark.parametrize("package", sorted(MODELS_MUST_NOT_REACH))
def test_each_model_of_memory_stays_in_its_room(package: str) -> None:
    graph = grimp.build_graph("mmpool_cli", include_external_packages=False, cache_dir=None)
    reached = [
        (forbidden, chain)
        for forbidden in MODELS_MUST_NOT_REACH[package]
        for chain in [graph.find_shortest_chains(importer=package, imported=forbidden, as_packages=True)]
        if chain
    ]
    assert reached == [], f"{package} reaches {reached}"
