"""The modules of ``proxy/`` form a DAG that points down the layers.

A cycle works only while its imports stay in the right order (or hide inside functions),
and it means two modules are one idea split in two. The graph is built from the source
with :mod:`ast`: every ``proxy.*`` import, including those inside functions; the runtime
graph leaves out those under ``if TYPE_CHECKING:`` (never run), the typed graph keeps them
(a circle of types is still two modules that know each other).

Three rules: no cycle at run time; no cycle even counting ``TYPE_CHECKING`` imports; no
import up the layers of :data:`LAYERS`. And ``import proxy.config`` (what ``check`` and
every test load first) pulls in no HTTP server or JWT library.
"""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
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


def _imports(node: ast.AST, typed: bool = False) -> Iterator[ast.Import | ast.ImportFrom]:
    """Every import statement under ``node``, skipping ``if TYPE_CHECKING:`` bodies unless
    ``typed``."""
    for child in ast.iter_child_nodes(node):
        if not typed and isinstance(child, ast.If) and _is_type_checking(child.test):
            for other in child.orelse:  # the else branch does run
                if isinstance(other, ast.Import | ast.ImportFrom):
                    yield other
                yield from _imports(other)
            continue
        if isinstance(child, ast.Import | ast.ImportFrom):
            yield child
        yield from _imports(child, typed)


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


def _imported(
    source: str, module: str, is_package: bool, modules: set[str], typed: bool = False
) -> set[str]:
    """The modules of ``modules`` that ``module`` (whose text is ``source``) imports
    (``typed``: also under ``if TYPE_CHECKING:``)."""
    return {
        target
        for stmt in _imports(ast.parse(source), typed)
        for target in _targets(stmt, module, is_package, modules)
        if target in modules and target != module
    }


def import_graph(typed: bool = False) -> dict[str, set[str]]:
    """Module → the modules it imports: at run time, or (``typed``) also for types."""
    files = {_module_name(p): p for p in sorted((ROOT / PACKAGE).rglob("*.py"))}
    modules = set(files)
    return {
        module: _imported(path.read_text(), module, path.name == "__init__.py", modules, typed)
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
    assert _imported(source, "proxy.z", False, modules, typed=True) == expected | {"proxy.f"}
    assert "proxy.config" in import_graph()["proxy.cli"]


def test_no_import_cycles() -> None:
    graph = import_graph()
    cycles = [" -> ".join(_a_cycle(graph, c)) for c in _strongly_connected(graph)]
    assert not cycles, "import cycles:\n  " + "\n  ".join(cycles)


# The layers, top first: a module may import its own layer's modules and those of the
# layers below it, never one above. A name is a module or a package (with everything in
# it). Every module of proxy/ must be in one layer, so a new one is placed on purpose.
LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    # programs: nothing imports them (proxy.cli_tools is the console script: proxy.cli
    # is loaded by it, only to serve)
    (
        "cli",
        (
            "proxy.__main__",
            "proxy.cli_tools",
            "proxy.cli",
            "proxy.cli_serve",
            "proxy.cli_login",
            "proxy.demo",
        ),
    ),
    ("reload", ("proxy.reload",)),  # applies a new config to the running app
    ("downstream", ("proxy.downstream",)),  # what clients reach (aiohttp)
    ("readiness", ("proxy.readiness",)),
    ("modern", ("proxy.modern",)),  # the 2026-07-28 side
    ("sse_writer", ("proxy.sse_writer",)),  # every SSE response (aiohttp), both eras
    ("registry", ("proxy.registry",)),  # the session table's asyncio adapter
    ("context", ("proxy.context",)),  # what the whole process shares
    (
        "runtime",
        ("proxy.runner_remote", "proxy.runtime", "proxy.runner_store", "proxy.client_conn"),
    ),  # one session's executor
    (
        "servers/replicas",
        (
            "proxy.servers",
            "proxy.replicas",
            "proxy.replica_lease",
            "proxy.replica_reaper",
            "proxy.forwarding",
            "proxy.forwarding_fields",
            "proxy.forwarding_seat",
            "proxy.forwarding_wire",
            "proxy.standalone_seat",
        ),
    ),
    ("upstream/store", ("proxy.upstream", "proxy.store")),
    ("shim", ("proxy.shim",)),  # the stdio shim (connect): a client, on the core alone
    ("tracing", ("proxy.tracing",)),  # OpenTelemetry spans: hooks every layer above calls
    (
        "config",
        (
            "proxy.config",
            "proxy.config_auth",
            "proxy.config_resource",
            "proxy.config_doc",
            "proxy.config_file",
            "proxy.config_env",
            "proxy.config_import",
            "proxy.config_oauth",
            "proxy.config_policy",
            "proxy.config_rules",
            "proxy.config_sections",
            "proxy.config_strings",
            "proxy.config_system",
            "proxy.config_tracing",
            "proxy.config_upstream",
            "proxy.jwks_keys",
            "proxy.reload_plan",
        ),
    ),
    ("core", ("proxy.core",)),  # sans-I/O (tests/core/test_sans_io.py)
    (
        "leaves",
        (
            "proxy",
            "proxy.backoff",
            "proxy.logs",
            "proxy.looplag",
            "proxy.metrics",
            "proxy.metrics_batch",
        ),
    ),  # import none
)


def layer_of(module: str) -> int:
    """The index in :data:`LAYERS` (0 is the top) of the layer ``module`` is in."""
    found = [
        i
        for i, (_, members) in enumerate(LAYERS)
        for member in members
        if module == member or (member != PACKAGE and module.startswith(member + "."))
    ]
    assert len(found) == 1, f"{module} is in {len(found)} layers of LAYERS, not one"
    return found[0]


def test_no_import_cycles_counting_type_checking_imports() -> None:
    graph = import_graph(typed=True)
    cycles = [" -> ".join(_a_cycle(graph, c)) for c in _strongly_connected(graph)]
    assert not cycles, "import cycles (TYPE_CHECKING included):\n  " + "\n  ".join(cycles)


def test_every_module_is_in_one_layer() -> None:
    for module in import_graph():
        layer_of(module)


def test_no_import_points_up_the_layers() -> None:
    graph = import_graph(typed=True)
    up = sorted(
        f"{a} ({LAYERS[layer_of(a)][0]}) -> {b} ({LAYERS[layer_of(b)][0]})"
        for a, bs in graph.items()
        for b in bs
        if layer_of(b) < layer_of(a)
    )
    assert not up, "imports up the layers:\n  " + "\n  ".join(up)


def test_the_layer_rule_sees_an_import_up() -> None:
    assert layer_of("proxy.config_auth") > layer_of("proxy.downstream.jwks")
    assert layer_of("proxy") == layer_of("proxy.logs") == len(LAYERS) - 1
    assert layer_of("proxy.core.session") == layer_of("proxy.core")


HEAVY_FOR_CONFIG = ("aiohttp", "jwt", "cryptography")


def _loaded_by(module: str, heavy: tuple[str, ...]) -> list[str]:
    """The modules of the ``heavy`` packages that ``import module`` loads in a fresh
    interpreter."""
    code = f"import json, sys; import {module}; print(json.dumps(sorted(sys.modules)))"
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
    }
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT, env=env
    ).stdout
    return sorted(m for m in json.loads(out) if m.split(".")[0] in heavy)


def test_importing_the_config_loads_no_http_server_nor_jwt() -> None:
    """``import proxy.config`` in a fresh interpreter: the config check (and every test)
    must not pay for aiohttp, PyJWT or cryptography (they load when a JWKS is read)."""
    loaded = _loaded_by("proxy.config", HEAVY_FOR_CONFIG)
    assert loaded == [], f"import proxy.config loaded {loaded}"


def test_check_and_a_refused_config_load_no_server_library() -> None:
    """``import proxy.cli`` (all ``check`` and a start load before the config is read and
    checked) loads none of the server's libraries: they come with :mod:`proxy.cli_serve`,
    once the config is good (a refused config exits in ~0.3 s of CPU, not ~0.9)."""
    loaded = _loaded_by("proxy.cli", (*HEAVY_FOR_CONFIG, "structlog", "redis", "websockets"))
    assert loaded == [], f"import proxy.cli loaded {loaded}"


def test_a_proxy_without_jwts_loads_no_jwt_library() -> None:
    """Serving without ``auth.jwt`` loads neither PyJWT nor cryptography (~90 ms of every
    start): they load once ``auth.jwt`` is set (proxy/downstream/auth.py JwtVerifier) or
    a JWKS is read (proxy/jwks_keys.py)."""
    loaded = _loaded_by("proxy.cli_serve", ("jwt", "cryptography"))
    assert loaded == [], f"import proxy.cli_serve loaded {loaded}"
