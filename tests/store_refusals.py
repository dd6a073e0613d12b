"""Calls through proxy replicas while their store fails (the Redis Cluster failover
tests): every refusal met on the way must be one the docs give (``503
store_unavailable`` with ``Retry-After`` and a JSON-RPC body), never a 500."""

from __future__ import annotations

import json

import aiohttp

from tests.downstream.sse_client import RawSession, messages, read_events
from tests.support import initialize_request, tool_call

ECHO = tool_call(8, "echo", {"text": "k"})


async def store_unavailable(resp: aiohttp.ClientResponse, request_id: object) -> None:
    assert resp.status == 503, await resp.text()
    assert int(resp.headers["Retry-After"]) >= 1
    body = await resp.json()
    assert body["id"] == request_id and body["error"]["code"] == -32000, body
    assert body["error"]["data"] == {"reason": "store_unavailable"}


async def serves(http: aiohttp.ClientSession, url: str) -> bool:
    """A new session through ``url`` answers a call (False: not yet; each refusal met on
    the way is one the docs give, never a 500)."""
    client = RawSession(http, url)
    init = initialize_request(0, version=client.version, client="raw")
    for body in (init, {"jsonrpc": "2.0", "method": "notifications/initialized"}, ECHO):
        async with http.post(url, json=body, headers=client.headers()) as resp:
            if resp.status == 503:
                await store_unavailable(resp, body.get("id"))
                return False
            if resp.status == 404:  # the session was dropped meanwhile
                return False
            assert resp.status in (200, 202), (resp.status, await resp.text())
            client.session_id = client.session_id or resp.headers["Mcp-Session-Id"]
            answers = [json.loads(e.data) for e in await read_events(resp) if e.data]
        if "id" in body and not answers:  # its stream ended unanswered: the same
            return False
    return bool(answers[-1]["result"]["content"][0]["text"] == "k")


async def answers(http: aiohttp.ClientSession, url: str, session_id: str) -> bool:
    """The session answers a call through ``url`` (False: a documented 503, try again)."""
    client = RawSession(http, url, session_id=session_id)
    async with http.post(url, json=ECHO, headers=client.headers()) as resp:
        if resp.status == 503:
            await store_unavailable(resp, ECHO["id"])
            return False
        assert resp.status == 200, (resp.status, await resp.text())
        answer = messages(await read_events(resp))[-1]
    return bool(answer["result"]["content"][0]["text"] == "k")
