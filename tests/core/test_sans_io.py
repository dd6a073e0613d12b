"""proxy.core must stay sans-I/O: importing it pulls in no I/O, clock or randomness."""

from __future__ import annotations

import json
import pkgutil
import subprocess
import sys

import proxy.core

FORBIDDEN = ("asyncio", "aiohttp", "websockets", "redis", "socket", "random", "secrets", "time")


def test_importing_core_pulls_in_no_io() -> None:
    modules = [f"proxy.core.{m.name}" for m in pkgutil.iter_modules(proxy.core.__path__)]
    assert "proxy.core.session" in modules
    code = (
        "import sys, json\n"
        f"before = set(sys.modules)\n"
        f"for name in {modules!r}: __import__(name)\n"
        "print(json.dumps(sorted(set(sys.modules) - before)))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    loaded = json.loads(out)
    bad = sorted(m for m in loaded if m.split(".")[0] in FORBIDDEN)
    assert bad == [], f"proxy.core imported {bad}"
