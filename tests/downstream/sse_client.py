"""A raw aiohttp MCP client for protocol-level tests: it sees every byte and header."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp

from proxy.core.sse import SSEDecoder, SSEEvent
from tests.support import MCP_HEADERS, RunningProxy, initialize_request, run_proxy


@dataclass
class RawSession:
    http: aiohttp.ClientSession
    url: str
    session_id: str = ""
    version: str = "2025-11-25"
    init_result: dict[str, Any] = field(default_factory=dict)

    def headers(self, **extra: str) -> dict[str, str]:
        h = dict(MCP_HEADERS)
        if self.session_id:
            h["Mcp-Session-Id"] = self.session_id
            h["MCP-Protocol-Version"] = self.version
        h.update(extra)
        return h

    async def initialize(self) -> None:
        await self.initialize_with({})

    async def initialize_with(self, capabilities: dict[str, Any]) -> None:
        """``initialize`` declaring ``capabilities`` (``{"streams": {}}``: the seed's)."""
        body = initialize_request(0, version=self.version, client="raw")
        body["params"]["capabilities"] = capabilities
        async with self.http.post(self.url, json=body, headers=self.headers()) as resp:
            assert resp.status == 200, await resp.text()
            self.session_id = resp.headers["Mcp-Session-Id"]
            events = await read_events(resp)
        self.init_result = json.loads(events[-1].data)["result"]
        await self.notify("notifications/initialized")

    async def notify(self, method: str, params: dict[str, Any] | None = None) -> None:
        body: dict[str, Any] = {"jsonrpc": "2.0", "method": method}
        if params is not None:
            body["params"] = params
        async with self.http.post(self.url, json=body, headers=self.headers()) as resp:
            assert resp.status == 202, await resp.text()

    async def request(
        self, rid: Any, method: str, params: dict[str, Any] | None = None
    ) -> list[SSEEvent]:
        body: dict[str, Any] = {"jsonrpc": "2.0", "id": rid, "method": method}
        if params is not None:
            body["params"] = params
        async with self.http.post(self.url, json=body, headers=self.headers()) as resp:
            assert resp.status == 200, await resp.text()
            return await read_events(resp)


async def read_events(resp: aiohttp.ClientResponse) -> list[SSEEvent]:
    """The events of an SSE answer; a JSON answer (a large lone answer: ``sse.json_answer_*``)
    as the one event it would have been."""
    if resp.content_type == "application/json":
        return [SSEEvent(data=(await resp.read()).decode())]
    dec = SSEDecoder()
    events: list[SSEEvent] = []
    async for chunk in resp.content.iter_any():
        events += dec.feed(chunk)
    return events


async def live_messages(resp: aiohttp.ClientResponse) -> AsyncIterator[dict[str, Any]]:
    """The messages of an SSE answer as they come (one ``data:`` line each), so that a
    test can answer a question before the stream goes on."""
    async for line in resp.content:
        if line.startswith(b"data: ") and line[6:].strip():
            yield json.loads(line[6:])


def messages(events: list[SSEEvent]) -> list[dict[str, Any]]:
    return [json.loads(e.data) for e in events if e.data]


@asynccontextmanager
async def proxy_session(
    tmp_path: Path, command: list[str] | None = None, **sections: dict[str, Any]
) -> AsyncIterator[tuple[RunningProxy, aiohttp.ClientSession, RawSession]]:
    """The proxy (:func:`tests.support.run_proxy` with these arguments), an HTTP client, and
    a client session initialized on the proxy with it."""
    async with run_proxy(tmp_path, command, **sections) as proxy, aiohttp.ClientSession() as http:
        session = RawSession(http, proxy.url)
        await session.initialize()
        yield proxy, http, session
