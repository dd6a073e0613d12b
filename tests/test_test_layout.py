"""The layout of the tests themselves: a ``test_*.py`` module holds tests, never helpers
that another module imports. Shared helpers live in ``conftest.py`` (fixtures) or in a
support module named for what it holds (``tests/support.py``, ``tests/modern/support.py``,
``tests/proxy_lives.py``, ``tests/jwt_issuer.py``, ...): importing a test module from
another runs its tests' collection twice, ties one file's tests to another's edits, and
hides the helper from whoever looks for it by name.
"""

from __future__ import annotations

import ast
from pathlib import Path

TESTS = Path(__file__).resolve().parent


def _is_test_module(dotted: str, relative: bool = False) -> bool:
    """Whether ``dotted`` names a ``test_*`` module of this suite (not, say, a library's
    ``aiohttp.test_utils``)."""
    parts = dotted.split(".")
    ours = relative or parts[0] == "tests"
    return ours and any(part.startswith("test_") for part in parts)


def imports_of_test_modules(path: Path) -> list[str]:
    """The ``test_*`` modules that the Python file at ``path`` imports (absolute or
    relative, at module level or inside a function), as ``line: module``."""
    found: list[str] = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        names: list[str] = []
        relative = False
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base, relative = node.module or "", node.level > 0
            # ``from tests.x import test_y`` and ``from . import test_y`` import modules too.
            names = [base] + [f"{base}.{alias.name}" for alias in node.names]
        found += [f"{node.lineno}: {name}" for name in names if _is_test_module(name, relative)]
    return sorted(set(found))


def test_no_module_of_the_tests_imports_a_test_module() -> None:
    offenders = {
        str(path.relative_to(TESTS.parent)): found
        for path in sorted(TESTS.rglob("*.py"))
        if "node_modules" not in path.parts and (found := imports_of_test_modules(path))
    }
    assert offenders == {}, "move the shared helpers to a conftest.py or a support module"


def test_the_check_sees_every_form_of_import(tmp_path: Path) -> None:
    sample = tmp_path / "sample.py"
    sample.write_text(
        "import tests.test_restart\n"
        "from tests.modern.test_facade import SERVER\n"
        "from tests.modern import test_facade\n"
        "from .test_stream import full_parse_summary\n"
        "def f():\n"
        "    from tests.test_replicas import shared\n"
        "from tests.support import eventually\n"
        "from tests.proxy_lives import lives\n"
        "from aiohttp.test_utils import TestClient\n"
    )
    lines = {entry.split(":")[0] for entry in imports_of_test_modules(sample)}
    assert lines == {"1", "2", "3", "4", "6"}
