"""The modules of ``proxy/`` import each other without cycles.

A cycle works only while its imports stay in the right order (or hide inside functions),
and it means two modules are one idea split in two. The graph is built from the source
with :mod:`ast`: every ``proxy.*`` import, including those inside functions, but not
those under ``if TYPE_CHECKING:`` (never run).
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = "proxy"


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _is_type_checking(test: ast.expr) -> bool:
    """``if TYPE_CHECKING:`` or ``if typing.TYPE_CHECKING:``."""
    if isinstance(test, ast.Name):
        return test.id == "TYPE_CHECKING"
    return isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"


def _imports(node: ast.AST) -> Iterator[ast.Import | ast.ImportFrom]:
    """Every import statement under ``node``, skipping ``if TYPE_CHECKING:`` bodies."""
    for child in ast.iter_child_nodes(node):
        if isinstance(child, ast.If) and _is_type_checking(child.test):
            for other in child.orelse:  # the else branch does run
                if isinstance(other, ast.Import | ast.ImportFrom):
                    yield other
                yield from _imports(other)
            continue
        if isinstance(child, ast.Import | ast.ImportFrom):
            yield child
        yield from _imports(child)


def _targets(
    stmt: ast.Import | ast.ImportFrom, module: str, is_package: bool, modules: set[str]
) -> Iterator[str]:
    """The ``proxy`` modules one import statement loads."""
    if isinstance(stmt, ast.Import):
        for alias in stmt.names:
            if alias.name.split(".")[0] == PACKAGE:
                yield alias.name
        return
    base = stmt.module or ""
    if stmt.level:  # relative: resolve against the importing module's package
        package = module.split(".") if is_package else module.split(".")[:-1]
        package = package[: len(package) - (stmt.level - 1)]
        base = ".".join([*package, base] if base else package)
    if base.split(".")[0] != PACKAGE:
        return
    for alias in stmt.names:
        submodule = f"{base}.{alias.name}"  # `from proxy.core import jsonrpc`
        yield submodule if submodule in modules else base


def _imported(source: str, module: str, is_package: bool, modules: set[str]) -> set[str]:
    """The modules of ``modules`` that ``module`` (whose text is ``source``) imports."""
    return {
        target
        for stmt in _imports(ast.parse(source))
        for target in _targets(stmt, module, is_package, modules)
        if target in modules and target != module
    }


def import_graph() -> dict[str, set[str]]:
    files = {_module_name(p): p for p in sorted((ROOT / PACKAGE).rglob("*.py"))}
    modules = set(files)
    return {
        module: _imported(path.read_text(), module, path.name == "__init__.py", modules)
        for module, path in files.items()
    }


def _strongly_connected(graph: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's algorithm: the components of more than one module."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                components.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return components


def _a_cycle(graph: dict[str, set[str]], component: list[str]) -> list[str]:
    """One cycle through the component's first module, as the path of imports."""
    start, members = component[0], set(component)
    paths = {start: [start]}
    queue = [start]
    while queue:  # breadth first: the shortest way back to ``start``
        v = queue.pop(0)
        for w in sorted(graph[v] & members):
            if w == start:
                return [*paths[v], start]
            if w not in paths:
                paths[w] = [*paths[v], w]
                queue.append(w)
    raise AssertionError(f"no cycle in {component}")  # pragma: no cover


def test_the_graph_has_every_import_that_runs() -> None:
    source = """
import os
import proxy.a
from proxy.b import thing
from proxy import c
from . import d
from .e import thing as other
from typing import TYPE_CHECKING
if TYPE_CHECKING:
    from proxy import f
else:
    import proxy.g

def later():
    from proxy.h import thing
"""
    modules = {f"proxy.{m}" for m in "abcdefghz"} | {"proxy"}
    expected = {f"proxy.{m}" for m in "abcdegh"}  # not f: only under TYPE_CHECKING
    assert _imported(source, "proxy.z", False, modules) == expected
    assert "proxy.config" in import_graph()["proxy.cli"]


def test_no_import_cycles() -> None:
    graph = import_graph()
    cycles = [" -> ".join(_a_cycle(graph, c)) for c in _strongly_connected(graph)]
    assert not cycles, "import cycles:\n  " + "\n  ".join(cycles)
