"""A raw 2026-07-28 client for the tests (no SDK ships a Tasks-extension client yet).

Each request is its own POST with the ``_meta`` and the mirrored headers the spec asks
for; answers are read whether they come as JSON or as an SSE stream.
"""

from __future__ import annotations

import itertools
import json
from dataclasses import dataclass, field
from typing import Any

import aiohttp

VERSION = "2026-07-28"
TASKS = {"extensions": {"io.modelcontextprotocol/tasks": {}}}
ALL = {"elicitation": {}, "sampling": {}, "roots": {}, **TASKS}
_NAMED = {"tools/call": "name", "prompts/get": "name", "resources/read": "uri"}


@dataclass
class Answer:
    status: int
    content_type: str
    body: dict[str, Any]
    notes: list[dict[str, Any]] = field(default_factory=list)  # before the answer (SSE)

    @property
    def result(self) -> dict[str, Any]:
        assert "result" in self.body, self.body
        return dict(self.body["result"])

    @property
    def error(self) -> dict[str, Any]:
        assert "error" in self.body, self.body
        return dict(self.body["error"])


def request_headers(method: str, params: dict[str, Any]) -> dict[str, str]:
    headers = {
        "Content-Type": "application/json",
        "Accept": "application/json, text/event-stream",
        "MCP-Protocol-Version": VERSION,
        "Mcp-Method": method,
    }
    field_name = _NAMED.get(method) or ("taskId" if method.startswith("tasks/") else None)
    if field_name is not None and isinstance(params.get(field_name), str):
        headers["Mcp-Name"] = params[field_name]
    return headers


def body(
    method: str, params: dict[str, Any] | None, rid: Any, caps: dict[str, Any] | None
) -> dict[str, Any]:
    params = dict(params or {})
    meta = dict(params.pop("_meta", None) or {})
    meta.setdefault("io.modelcontextprotocol/protocolVersion", VERSION)
    meta.setdefault("io.modelcontextprotocol/clientCapabilities", caps or {})
    meta.setdefault("io.modelcontextprotocol/clientInfo", {"name": "raw-test", "version": "0"})
    params["_meta"] = meta
    return {"jsonrpc": "2.0", "id": rid, "method": method, "params": params}


class Modern:
    def __init__(self, http: aiohttp.ClientSession, url: str, caps: dict[str, Any] | None = None):
        self.http = http
        self.url = url
        self.caps = caps if caps is not None else ALL
        self._ids = itertools.count(1)

    async def send(
        self,
        method: str,
        params: dict[str, Any] | None = None,
        *,
        caps: dict[str, Any] | None = None,
        headers: dict[str, str] | None = None,
    ) -> Answer:
        message = body(method, params, next(self._ids), self.caps if caps is None else caps)
        sent = {**request_headers(method, message["params"]), **(headers or {})}
        async with self.http.post(self.url, json=message, headers=sent) as resp:
            return await read_answer(resp)

    async def call(self, tool: str, arguments: dict[str, Any] | None = None, **kw: Any) -> Answer:
        return await self.send("tools/call", {"name": tool, "arguments": arguments or {}}, **kw)

    async def task(self, method: str, task_id: str, **params: Any) -> Answer:
        return await self.send(method, {"taskId": task_id, **params})


async def read_answer(resp: aiohttp.ClientResponse) -> Answer:
    kind = resp.headers.get("Content-Type", "")
    if kind.startswith("text/event-stream"):
        notes: list[dict[str, Any]] = []
        async for line in resp.content:
            if line.startswith(b"data: ") and line[6:].strip():
                message = json.loads(line[6:])
                if "method" in message:
                    notes.append(message)
                else:
                    return Answer(resp.status, kind, message, notes)
        raise AssertionError(f"the stream ended without an answer; notes: {notes}")
    text = await resp.text()
    return Answer(resp.status, kind, json.loads(text) if text else {})
