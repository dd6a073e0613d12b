"""A WebSocket client of the proxy's ``/ws`` (the ``websockets`` library, not aiohttp, so
that the server is checked against another implementation): :func:`socket` opens one
with the ``mcp`` subprotocol, :class:`Client` sends JSON-RPC frames and reads parsed
ones, :func:`initialize` opens a session over it; :func:`socket_beside` opens one to a
replica of tests/proxy_lives.py. Used by test_websocket.py, tests/test_shutdown.py and
the replicas' tests."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from typing import Any

import pytest
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed
from websockets.typing import Subprotocol

from proxy.downstream.websocket import SESSION_META
from tests.support import RunningProxy

DEADLINE = 60.0


class Client:
    """One socket: JSON-RPC frames out, parsed frames in."""

    def __init__(self, ws: ClientConnection) -> None:
        self.ws = ws

    async def send(self, obj: Any) -> None:
        await self.ws.send(json.dumps(obj))

    async def recv(self) -> dict[str, Any]:
        msg: dict[str, Any] = json.loads(await asyncio.wait_for(self.ws.recv(), DEADLINE))
        return msg

    async def call(
        self, rid: Any, method: str, params: dict[str, Any] | None = None
    ) -> tuple[dict[str, Any], list[dict[str, Any]]]:
        """Send a request; return its response and what came before it."""
        await self.send(request(rid, method, params))
        others: list[dict[str, Any]] = []
        while True:
            msg = await self.recv()
            if msg.get("id") == rid and "method" not in msg:
                return msg, others
            others.append(msg)

    async def closed_with(self) -> tuple[int, str]:
        """Wait for the server to close the socket; its close code and reason."""
        with pytest.raises(ConnectionClosed) as info:
            while True:
                await asyncio.wait_for(self.ws.recv(), DEADLINE)
        rcvd = info.value.rcvd
        assert rcvd is not None, "closed without a close frame"
        return rcvd.code, rcvd.reason


def request(rid: Any, method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
    body: dict[str, Any] = {"jsonrpc": "2.0", "id": rid, "method": method}
    if params is not None:
        body["params"] = params
    return body


def tool(name: str, args: dict[str, Any], token: str | int | None = None) -> dict[str, Any]:
    params: dict[str, Any] = {"name": name, "arguments": args}
    if token is not None:
        params["_meta"] = {"progressToken": token}
    return params


def ws_base(proxy: RunningProxy) -> str:
    return proxy.base.replace("http://", "ws://", 1) + "/ws"


@contextlib.asynccontextmanager
async def socket(
    proxy: RunningProxy, session_id: str | None = None, via: str = "header", **kw: Any
) -> AsyncIterator[Client]:
    url, headers = ws_base(proxy), {}
    if session_id and via == "header":
        headers["Mcp-Session-Id"] = session_id
    elif session_id:
        url += f"?mcp-session-id={session_id}"
    async with connect(
        url,
        subprotocols=[Subprotocol("mcp")],
        additional_headers=headers,
        proxy=None,
        open_timeout=30,
        **kw,
    ) as ws:
        assert ws.subprotocol == "mcp"
        yield Client(ws)


@contextlib.asynccontextmanager
async def socket_beside(mcp_url: str, session_id: str | None = None) -> AsyncIterator[Client]:
    """A socket to the ``/ws`` of the proxy whose ``/mcp`` is at ``mcp_url`` (one of
    several replicas: tests/proxy_lives.py), continuing ``session_id`` if given."""
    url = mcp_url.replace("http://", "ws://", 1).removesuffix("/mcp") + "/ws"
    headers = {"Mcp-Session-Id": session_id} if session_id else {}
    async with connect(
        url,
        subprotocols=[Subprotocol("mcp")],
        additional_headers=headers,
        proxy=None,
        open_timeout=30,
    ) as ws:
        yield Client(ws)


async def initialize(
    c: Client, version: str = "2025-06-18", caps: dict[str, Any] | None = None
) -> str:
    """``initialize`` + ``notifications/initialized``; the session id from ``_meta``."""
    params = {
        "protocolVersion": version,
        "capabilities": caps or {},
        "clientInfo": {"name": "ws-test", "version": "0"},
    }
    resp, _ = await c.call(0, "initialize", params)
    assert resp["result"]["serverInfo"]["name"] in ("legacy-fixture", "flood", "task-fixture")
    session_id: str = resp["result"]["_meta"][SESSION_META]
    await c.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
    return session_id
