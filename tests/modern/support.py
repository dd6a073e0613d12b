"""What the modern (2026-07-28) tests share: the task fixture server (``SERVER``,
tests/fixtures/task_server.py), the proxy in front of it with a raw modern client
(:func:`modern_proxy`), and what the fixture received (:func:`received`)."""

from __future__ import annotations

import contextlib
import json
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp

from tests.modern.client import Modern
from tests.support import ROOT, RunningProxy, run_proxy

SERVER = [sys.executable, str(ROOT / "tests" / "fixtures" / "task_server.py")]


@contextlib.asynccontextmanager
async def modern_proxy(
    tmp_path: Path, **sections: dict[str, Any]
) -> AsyncIterator[tuple[RunningProxy, Modern, Path]]:
    """The proxy in front of the task fixture; the fixture logs what it receives."""
    server_log = tmp_path / "server.log"
    upstream = {"env": {"TASK_SERVER_LOG": str(server_log)}, **sections.pop("upstream", {})}
    async with (
        run_proxy(tmp_path, SERVER, upstream=upstream, **sections) as proxy,
        aiohttp.ClientSession() as http,
    ):
        yield proxy, Modern(http, proxy.url), server_log


def received(server_log: Path) -> list[dict[str, Any]]:
    """The messages the task fixture logged (``TASK_SERVER_LOG``), in order."""
    if not server_log.exists():
        return []
    return [json.loads(line.split(" ", 1)[1]) for line in server_log.read_text().splitlines()]
