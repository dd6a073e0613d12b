"""The registry's limits hold under concurrency (proxy/runtime.py), over /mcp and /ws."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from tests.support import FIXTURE, MCP_HEADERS, RunningProxy, run_proxy

LIMIT = 5
CLIENTS = 50


def _children_of(pid: int) -> list[int]:
    """Direct children of ``pid`` (Linux /proc), i.e. the proxy's server processes."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        # pid (comm) state ppid ...: comm may hold spaces, so split after the last ')'.
        if int(stat.rpartition(")")[2].split()[1]) == pid:
            found.append(int(entry.name))
    return found


def _initialize(rid: int) -> dict[str, Any]:
    params = {
        "protocolVersion": "2025-06-18",
        "capabilities": {},
        "clientInfo": {"name": "crowd", "version": "0"},
    }
    return {"jsonrpc": "2.0", "id": rid, "method": "initialize", "params": params}


async def _http_initialize(http: aiohttp.ClientSession, proxy: RunningProxy, rid: int) -> int:
    async with http.post(proxy.url, json=_initialize(rid), headers=MCP_HEADERS) as resp:
        await resp.read()
        return resp.status


async def _ws_initialize(http: aiohttp.ClientSession, proxy: RunningProxy, rid: int) -> int:
    url = proxy.base.replace("http://", "ws://", 1) + "/ws"
    async with http.ws_connect(url, protocols=("mcp",)) as ws:
        await ws.send_str(json.dumps(_initialize(rid)))
        reply = json.loads((await ws.receive()).data)
        if "result" in reply:
            return 200
        return 503 if reply["error"]["data"]["reason"] == "too_many_sessions" else 500


@pytest.mark.parametrize("via", ["http", "ws"])
async def test_concurrent_initializes_never_exceed_max_sessions(tmp_path: Path, via: str) -> None:
    """Defect #9.1: the count was checked, the spawn awaited, then the session registered."""
    opener = _http_initialize if via == "http" else _ws_initialize
    async with (
        run_proxy(tmp_path, FIXTURE, sessions={"max_sessions": LIMIT}) as proxy,
        aiohttp.ClientSession() as http,
    ):
        statuses = await asyncio.gather(*(opener(http, proxy, i) for i in range(CLIENTS)))
        assert statuses.count(200) <= LIMIT, statuses
        assert statuses.count(200) + statuses.count(503) == CLIENTS, statuses
        # Over HTTP the sessions stay; a closed socket leaves its session to idle out.
        assert len(_children_of(proxy.process.pid)) <= LIMIT
