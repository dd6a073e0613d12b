"""The registry's limits hold under concurrency (proxy/runtime.py), over /mcp and /ws."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import aiohttp
import pytest

from tests.support import (
    FIXTURE,
    MCP_HEADERS,
    RunningProxy,
    children_of,
    initialize_request,
    run_proxy,
)

LIMIT = 5
CLIENTS = 50
VERSION = "2025-06-18"


async def _http_initialize(http: aiohttp.ClientSession, proxy: RunningProxy, rid: int) -> int:
    body = initialize_request(rid, version=VERSION)
    async with http.post(proxy.url, json=body, headers=MCP_HEADERS) as resp:
        await resp.read()
        return resp.status


async def _ws_initialize(http: aiohttp.ClientSession, proxy: RunningProxy, rid: int) -> int:
    url = proxy.base.replace("http://", "ws://", 1) + "/ws"
    async with http.ws_connect(url, protocols=("mcp",)) as ws:
        await ws.send_str(json.dumps(initialize_request(rid, version=VERSION)))
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
        assert len(children_of(proxy.process.pid)) <= LIMIT
