"""Inbound bearer tokens: refused without one on every route but /healthz, accepted with
one, and a principal never reaches another principal's session, task or MRTR state."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from tests.modern.client import Modern
from tests.modern.support import SERVER
from tests.support import bearer, initialize_request, run_proxy

ALICE = "alice-token-0123456789abcdef"
BOB = "bob-token-0123456789abcdef00"
AUTH = {"tokens": [{"token": ALICE, "principal": "alice"}, {"token": BOB, "principal": "bob"}]}
ACCEPT = {"Accept": "application/json, text/event-stream"}


@pytest.mark.parametrize("credentials", [None, "wrong-token-0123456789"])
async def test_every_route_but_healthz_needs_a_valid_token(
    tmp_path: Path, credentials: str | None
) -> None:
    headers = bearer(credentials) if credentials else {}
    async with run_proxy(tmp_path, SERVER, auth=AUTH) as proxy, aiohttp.ClientSession() as http:
        async with http.post(
            proxy.url, json=initialize_request(), headers={**ACCEPT, **headers}
        ) as resp:
            assert resp.status == 401
            assert resp.headers["WWW-Authenticate"].startswith('Bearer realm="mcp-resume-proxy"')
            assert (await resp.json())["error"]["data"]["reason"] == "unauthorized"
        for path in ("/mcp", "/ws", "/metrics", "/readyz", "/status", "/status.json"):
            async with http.get(proxy.base + path, headers=headers) as resp:
                assert resp.status == 401, path
        async with http.get(proxy.base + "/healthz") as resp:
            assert resp.status == 200
        log = proxy.log_text()
    assert ALICE not in log and BOB not in log


async def test_a_session_belongs_to_its_principal(tmp_path: Path) -> None:
    async with run_proxy(tmp_path, SERVER, auth=AUTH) as proxy, aiohttp.ClientSession() as http:
        async with http.post(
            proxy.url, json=initialize_request(), headers={**ACCEPT, **bearer(ALICE)}
        ) as resp:
            assert resp.status == 200
            session = resp.headers["Mcp-Session-Id"]
            await resp.read()
        call = {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}
        for who, status in ((BOB, 404), (ALICE, 200)):
            headers = {**ACCEPT, **bearer(who), "Mcp-Session-Id": session}
            headers["MCP-Protocol-Version"] = "2025-11-25"
            async with http.post(proxy.url, json=call, headers=headers) as resp:
                assert resp.status == status, await resp.text()
                await resp.read()
        # Over /ws too: bob cannot attach to alice's session.
        async with http.ws_connect(
            proxy.base.replace("http", "ws") + f"/ws?mcp-session-id={session}",
            headers=bearer(BOB),
            protocols=("mcp",),
        ) as ws:
            await ws.receive()
            assert ws.close_code == 4404


async def test_tasks_and_request_states_belong_to_their_principal(tmp_path: Path) -> None:
    tasks = {"mode": "always"}
    async with (
        run_proxy(tmp_path, SERVER, auth=AUTH, tasks=tasks) as proxy,
        aiohttp.ClientSession(headers=bearer(ALICE)) as as_alice,
        aiohttp.ClientSession(headers=bearer(BOB)) as as_bob,
    ):
        alice, bob = Modern(as_alice, proxy.url), Modern(as_bob, proxy.url)
        task_id = (await alice.call("wait", {"seconds": 0.2})).result["taskId"]
        for method in ("tasks/get", "tasks/cancel"):
            assert (await bob.task(method, task_id)).error["code"] == -32602
        assert (await alice.task("tasks/get", task_id)).status == 200
        asked = await alice.call("ask", {"question": "q"}, caps={"elicitation": {}})
        state = asked.result["requestState"]
        (key,) = asked.result["inputRequests"]
        retry: dict[str, Any] = {
            "name": "ask",
            "arguments": {},
            "requestState": state,
            "inputResponses": {key: {"action": "accept", "content": {"answer": "x"}}},
        }
        stolen = await bob.send("tools/call", retry, caps={"elicitation": {}})
        assert stolen.error["code"] == -32602
        mine = await alice.send("tools/call", retry, caps={"elicitation": {}})
        assert json.loads(mine.result["content"][0]["text"])["content"] == {"answer": "x"}


async def test_a_principal_holds_at_most_its_share_of_sessions(tmp_path: Path) -> None:
    auth = {**AUTH, "per_principal": {"max_sessions": 1}}
    async with run_proxy(tmp_path, SERVER, auth=auth) as proxy, aiohttp.ClientSession() as http:

        async def initialize(token: str) -> tuple[int, dict[str, Any], str | None]:
            async with http.post(
                proxy.url, json=initialize_request(), headers={**ACCEPT, **bearer(token)}
            ) as resp:
                text = await resp.text()
                body = json.loads(text.split("data: ")[-1]) if resp.status == 200 else {}
                if resp.status != 200:
                    body = json.loads(text)
                return resp.status, body, resp.headers.get("Mcp-Session-Id")

        status, _, alices = await initialize(ALICE)
        assert status == 200 and alices
        status, refused, _ = await initialize(ALICE)
        assert status == 503
        assert refused["error"]["data"]["reason"] == "too_many_sessions"
        assert "auth.per_principal.max_sessions=1" in refused["error"]["message"]
        assert (await initialize(BOB))[0] == 200  # bob has his own share
        headers = {**bearer(ALICE), "Mcp-Session-Id": alices}
        async with http.delete(proxy.url, headers=headers) as resp:
            assert resp.status in (200, 204)
        assert (await initialize(ALICE))[0] == 200  # her slot is free again


async def test_resumes_and_polls_are_rate_limited_per_principal(tmp_path: Path) -> None:
    auth = {**AUTH, "per_principal": {"resumes_per_minute": 2}}
    async with run_proxy(tmp_path, SERVER, auth=auth) as proxy, aiohttp.ClientSession() as http:
        async with http.post(
            proxy.url, json=initialize_request(), headers={**ACCEPT, **bearer(ALICE)}
        ) as resp:
            session = resp.headers["Mcp-Session-Id"]
            await resp.read()
        resume = {
            **bearer(ALICE),
            "Accept": "text/event-stream",
            "Mcp-Session-Id": session,
            "MCP-Protocol-Version": "2025-11-25",
            "Last-Event-ID": "not-an-event-id",
        }
        for _ in range(2):  # counted, whatever their outcome
            async with http.get(proxy.url, headers=resume) as resp:
                assert resp.status == 400
        poll = {"jsonrpc": "2.0", "id": 9, "method": "stream/poll", "params": {"streamId": "x"}}
        headers = {**ACCEPT, **bearer(ALICE), "Mcp-Session-Id": session}
        headers["MCP-Protocol-Version"] = "2025-11-25"
        async with http.post(proxy.url, json=poll, headers=headers) as resp:
            assert resp.status == 429
            assert 1 <= int(resp.headers["Retry-After"]) <= 30
            error = (await resp.json())["error"]
        assert error["data"]["reason"] == "rate_limited" and error["code"] == -32000
        async with http.get(proxy.url, headers=resume) as resp:
            assert resp.status == 429
        # Bob has his own budget; and alice's other requests are not limited.
        async with http.get(proxy.url, headers={**resume, **bearer(BOB)}) as resp:
            assert resp.status == 404  # not his session: refused, but not rate limited
        call = {"jsonrpc": "2.0", "id": 3, "method": "tools/list"}
        async with http.post(proxy.url, json=call, headers=headers) as resp:
            assert resp.status == 200
            await resp.read()


async def test_only_operators_read_what_spans_every_principal(tmp_path: Path) -> None:
    auth = {**AUTH, "operators": ["bob"]}
    async with run_proxy(tmp_path, SERVER, auth=auth) as proxy, aiohttp.ClientSession() as http:
        for path in ("/status", "/status.json", "/metrics"):
            async with http.get(proxy.base + path, headers=bearer(ALICE)) as resp:
                assert resp.status == 403, path
                assert (await resp.json())["error"]["data"]["reason"] == "forbidden"
            async with http.get(proxy.base + path, headers=bearer(BOB)) as resp:
                assert resp.status == 200, path
        # Her own work is not an operator's page: alice still uses /mcp and /readyz.
        async with http.get(proxy.base + "/readyz", headers=bearer(ALICE)) as resp:
            assert resp.status == 200
        async with http.post(
            proxy.url, json=initialize_request(), headers={**ACCEPT, **bearer(ALICE)}
        ) as resp:
            assert resp.status == 200
            await resp.read()
