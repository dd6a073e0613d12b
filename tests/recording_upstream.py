"""A minimal Streamable HTTP MCP server (2025-11-25, JSON answers) that records the
headers and body of every POST it gets: what a server behind the proxy sees."""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

TOOLS = [{"name": "echo", "description": "Echoes.", "inputSchema": {"type": "object"}}]


@dataclass
class Recorded:
    url: str = ""
    posts: list[tuple[dict[str, str], dict[str, Any]]] = field(default_factory=list)

    def calls(self, method: str) -> list[tuple[dict[str, str], dict[str, Any]]]:
        return [(h, b) for h, b in self.posts if b.get("method") == method]


def _answer(message: dict[str, Any]) -> dict[str, Any]:
    method, params = message.get("method"), message.get("params") or {}
    if method == "initialize":
        result: dict[str, Any] = {
            "protocolVersion": params.get("protocolVersion", "2025-11-25"),
            "capabilities": {"tools": {}},
            "serverInfo": {"name": "recording", "version": "0"},
        }
    elif method == "tools/list":
        result = {"tools": TOOLS}
    elif method == "tools/call":
        text = json.dumps((params.get("arguments") or {}).get("text"))
        result = {"content": [{"type": "text", "text": text}], "isError": False}
    elif method == "ping":
        result = {}
    else:
        error = {"code": -32601, "message": f"Method not found: {method}"}
        return {"jsonrpc": "2.0", "id": message.get("id"), "error": error}
    return {"jsonrpc": "2.0", "id": message.get("id"), "result": result}


@contextlib.asynccontextmanager
async def recording_upstream() -> AsyncIterator[Recorded]:
    recorded = Recorded()

    async def mcp(request: web.Request) -> web.StreamResponse:
        if request.method == "DELETE":
            return web.Response(status=200)
        if request.method != "POST":
            return web.Response(status=405)
        message = await request.json()
        recorded.posts.append((dict(request.headers), message))
        headers = {"Mcp-Session-Id": "recorded-session"}
        if "id" not in message or "method" not in message:
            return web.Response(status=202, headers=headers)
        return web.json_response(_answer(message), headers=headers)

    app = web.Application()
    app.router.add_route("*", "/mcp", mcp)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    recorded.url = f"http://127.0.0.1:{port}/mcp"
    try:
        yield recorded
    finally:
        await runner.cleanup()
