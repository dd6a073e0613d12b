"""MCP_RESUME_PROXY_SPEEDUPS: the proxy answers the same with msgspec and without it."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from tests.support import ROOT, initialize_request, log_events, run_proxy_on, tool_call

FLOOD = [sys.executable, str(ROOT / "tests" / "fixtures" / "flood_server.py")]
BIG = 123456789012345678901234567890  # beyond 64 bits: orjson would read it as a float
HEADERS = {"Accept": "application/json, text/event-stream", "MCP-Protocol-Version": "2025-11-25"}


def messages_of(body: str) -> list[dict[str, Any]]:
    return [
        json.loads(line[5:])
        for line in body.split("\n")
        if line.startswith("data:") and line[5:].strip()
    ]


async def one_call(url: str) -> dict[str, Any]:
    async with aiohttp.ClientSession() as http:
        async with http.post(url, json=initialize_request(), headers=HEADERS) as resp:
            session = resp.headers["Mcp-Session-Id"]
            await resp.read()
        headers = {**HEADERS, "Mcp-Session-Id": session}
        note = {"jsonrpc": "2.0", "method": "notifications/initialized"}
        async with http.post(url, json=note, headers=headers) as resp:
            assert resp.status == 202
        call = tool_call(BIG, "echo", {"text": "h\u00e9llo \u2028 \U0001f600"})
        async with http.post(url, json=call, headers=headers) as resp:
            assert resp.status == 200
            (answer,) = [m for m in messages_of(await resp.text()) if "id" in m]
            return answer


@pytest.mark.parametrize("speedups", ["on", "off"])
async def test_the_answer_is_the_same_with_and_without_msgspec(
    tmp_path: Path, speedups: str
) -> None:
    config = {
        "listen": {"host": "127.0.0.1", "port": 0},
        "upstream": {"command": FLOOD, "stop_grace_seconds": 3},
        "log": {"format": "json", "level": "info"},
    }
    env = {"MCP_RESUME_PROXY_SPEEDUPS": speedups}
    async with run_proxy_on(tmp_path, config, env) as proxy:
        answer = await one_call(proxy.url)
        (listening,) = log_events(proxy.log_text(), "proxy_listening")
    assert listening["json"] == ("msgspec" if speedups == "on" else "stdlib")
    assert answer["id"] == BIG and isinstance(answer["id"], int)
    assert answer["result"]["content"][0]["text"] == "h\u00e9llo \u2028 \U0001f600"


async def test_a_wrong_value_stops_the_proxy_at_start(tmp_path: Path) -> None:
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "proxy",
        "--port",
        "0",
        "--",
        *FLOOD,
        cwd=str(ROOT),
        env={**os.environ, "MCP_RESUME_PROXY_SPEEDUPS": "fast"},
        stderr=asyncio.subprocess.PIPE,
    )
    _, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode == 2
    assert b"MCP_RESUME_PROXY_SPEEDUPS: expected on or off, got 'fast'" in err
