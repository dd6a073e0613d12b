"""The 2026-07-28 façade end to end: a raw modern client, the proxy as a process, and a
legacy stdio server (tests/fixtures/task_server.py) that asks the legacy way.

Dual era on one endpoint, the spec's errors, discovery, MRTR, cancellation by closing the
response, subscriptions/listen, and the pool.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
from pathlib import Path

import aiohttp
import pytest

from tests.modern.client import VERSION, Modern, body, read_answer, request_headers
from tests.modern.support import modern_proxy, received
from tests.support import (
    eventually,
    initialize_request,
    run_proxy,
)


async def test_discover_answers_from_the_upstreams_own_initialize(tmp_path: Path) -> None:
    async with modern_proxy(tmp_path) as (_, client, _log):
        answer = await client.send("server/discover")
    assert answer.status == 200
    result = answer.result
    assert result["resultType"] == "complete"
    assert result["supportedVersions"][0] == VERSION
    assert "2025-11-25" in result["supportedVersions"]  # both eras on one endpoint
    assert result["capabilities"]["tools"] == {"listChanged": True}
    assert result["capabilities"]["extensions"] == {"io.modelcontextprotocol/tasks": {}}
    assert result["instructions"] == "A fixture for the modern façade."
    assert result["_meta"]["io.modelcontextprotocol/serverInfo"]["name"] == "task-fixture"
    assert result["cacheScope"] == "private" and result["ttlMs"] == 0


async def test_results_carry_result_type_cache_hints_and_server_info(tmp_path: Path) -> None:
    async with modern_proxy(tmp_path) as (_, client, _log):
        listed = await client.send("tools/list")
        called = await client.call("bad")
        read = await client.send("resources/read", {"uri": "test://watched"})
    assert listed.result["resultType"] == "complete"
    assert listed.result["ttlMs"] == 0 and listed.result["cacheScope"] == "private"
    assert {t["name"] for t in listed.result["tools"]} >= {"wait", "ask"}
    assert called.result["isError"] is True and called.result["resultType"] == "complete"
    assert "ttlMs" not in called.result  # tools/call is not cacheable
    assert read.result["contents"][0]["text"] == "content"
    for answer in (listed, called, read):
        assert (
            answer.result["_meta"]["io.modelcontextprotocol/serverInfo"]["name"] == "task-fixture"
        )


@pytest.mark.parametrize(
    ("case", "status", "code"),
    [
        ("version header missing", 400, -32020),
        ("version header differs", 400, -32020),
        ("method header missing", 400, -32020),
        ("method header differs", 400, -32020),
        ("name header missing", 400, -32020),
        ("name header differs", 400, -32020),
        ("name header base64 ok", 200, None),
        ("unknown version", 400, -32022),
        ("meta not an object", 400, -32602),
        ("capabilities missing", 400, -32602),
        ("unknown method", 404, -32601),
        ("removed method ping", 404, -32601),
        ("tasks/get without the extension", 400, -32021),
    ],
)
async def test_the_spec_errors_for_bad_modern_requests(
    tmp_path: Path, case: str, status: int, code: int | None
) -> None:
    method, params = "tools/call", {"name": "bad", "arguments": {}}
    message = body(method, params, 7, {})
    headers = request_headers(method, message["params"])
    meta = message["params"]["_meta"]
    if case == "version header missing":
        del headers["MCP-Protocol-Version"]
    elif case == "version header differs":
        headers["MCP-Protocol-Version"] = "2026-01-01"
    elif case == "method header missing":
        del headers["Mcp-Method"]
    elif case == "method header differs":
        headers["Mcp-Method"] = "tools/list"
    elif case == "name header missing":
        del headers["Mcp-Name"]
    elif case == "name header differs":
        headers["Mcp-Name"] = "echo"
    elif case == "name header base64 ok":
        headers["Mcp-Name"] = "=?base64?YmFk?="  # "bad"
    elif case == "unknown version":
        meta["io.modelcontextprotocol/protocolVersion"] = "2099-01-01"
        headers["MCP-Protocol-Version"] = "2099-01-01"
    elif case == "meta not an object":
        message["params"]["_meta"] = ["io.modelcontextprotocol/protocolVersion"]
    elif case == "capabilities missing":
        del meta["io.modelcontextprotocol/clientCapabilities"]
    elif case in ("unknown method", "removed method ping"):
        message["method"] = headers["Mcp-Method"] = "no/such" if "unknown" in case else "ping"
        del headers["Mcp-Name"]
    elif case == "tasks/get without the extension":
        message["method"] = headers["Mcp-Method"] = "tasks/get"
        message["params"] = {"taskId": "x", "_meta": meta}
        headers["Mcp-Name"] = "x"
    async with modern_proxy(tmp_path) as (proxy, client, _log):
        async with client.http.post(proxy.url, json=message, headers=headers) as resp:
            answer = await read_answer(resp)
        assert answer.status == status, (case, answer.body)
        if code is None:
            assert answer.result["isError"] is True
        else:
            assert answer.body["id"] == 7
            assert answer.error["code"] == code
        if code == -32022:
            assert answer.error["data"] == {
                "supported": answer.error["data"]["supported"],
                "requested": "2099-01-01",
            }
            assert VERSION in answer.error["data"]["supported"]
        if code == -32021:
            required = answer.error["data"]["requiredCapabilities"]
            assert required == {"extensions": {"io.modelcontextprotocol/tasks": {}}}
        # The proxy keeps serving after each refusal.
        assert (await client.call("bad")).result["isError"] is True


async def test_get_and_delete_from_a_modern_client_are_405_and_sessions_are_ignored(
    tmp_path: Path,
) -> None:
    async with modern_proxy(tmp_path) as (proxy, client, _log):
        headers = {"MCP-Protocol-Version": VERSION, "Accept": "text/event-stream"}
        for verb in ("GET", "DELETE"):
            async with client.http.request(verb, proxy.url, headers=headers) as resp:
                assert resp.status == 405, verb
        # A stray Mcp-Session-Id and Last-Event-ID change nothing for a modern request.
        answer = await client.call(
            "bad", headers={"Mcp-Session-Id": "nonsense", "Last-Event-ID": "0-1"}
        )
        assert answer.status == 200 and answer.result["isError"] is True


async def test_a_legacy_and_a_modern_client_at_once_neither_disturbs_the_other(
    tmp_path: Path,
) -> None:
    async with modern_proxy(tmp_path) as (proxy, client, _log):
        http = client.http
        headers = {"Accept": "application/json, text/event-stream"}
        async with http.post(proxy.url, json=initialize_request(), headers=headers) as resp:
            assert resp.status == 200
            session = resp.headers["Mcp-Session-Id"]
            await resp.read()
        legacy = {**headers, "Mcp-Session-Id": session, "MCP-Protocol-Version": "2025-06-18"}
        await http.post(
            proxy.url,
            json={"jsonrpc": "2.0", "method": "notifications/initialized"},
            headers=legacy,
        )

        async def legacy_calls() -> list[str]:
            texts = []
            for i in range(10):
                call = {
                    "jsonrpc": "2.0",
                    "id": 100 + i,
                    "method": "tools/call",
                    "params": {"name": "wait", "arguments": {"seconds": 0.01, "label": f"L{i}"}},
                }
                async with http.post(proxy.url, json=call, headers=legacy) as resp:
                    answer = await read_answer(resp)
                texts.append(answer.result["content"][0]["text"])
            return texts

        async def modern_calls() -> list[str]:
            texts = []
            for i in range(10):
                answer = await client.call("wait", {"seconds": 0.01, "label": f"M{i}"})
                texts.append(answer.result["content"][0]["text"])
            return texts

        old, new = await asyncio.gather(legacy_calls(), modern_calls())
    assert old == [f"waited L{i}" for i in range(10)]
    assert new == [f"waited M{i}" for i in range(10)]


async def test_a_missing_resource_is_the_2026_code_for_modern_clients_only(
    tmp_path: Path,
) -> None:
    """2026-07-28 server/resources.mdx §Error Handling: -32602, where the 2025 server says
    -32002 (kept in data.upstreamCode); a legacy client gets the server's error as sent."""
    missing = {"uri": "test://missing"}
    async with modern_proxy(tmp_path) as (proxy, client, _log):
        answer = await client.send("resources/read", missing)
        assert answer.status == 200
        assert answer.error == {
            "code": -32602,
            "message": "Resource not found",
            "data": {"uri": "test://missing", "upstreamCode": -32002},
        }
        http = client.http
        headers = {"Accept": "application/json, text/event-stream"}
        async with http.post(proxy.url, json=initialize_request(), headers=headers) as resp:
            session = resp.headers["Mcp-Session-Id"]
            await resp.read()
        legacy = {**headers, "Mcp-Session-Id": session, "MCP-Protocol-Version": "2025-06-18"}
        initialized = {"jsonrpc": "2.0", "method": "notifications/initialized"}
        async with http.post(proxy.url, json=initialized, headers=legacy) as resp:
            assert resp.status == 202
        read = {"jsonrpc": "2.0", "id": 5, "method": "resources/read", "params": missing}
        async with http.post(proxy.url, json=read, headers=legacy) as resp:
            old = await read_answer(resp)
        assert old.error == {
            "code": -32002,
            "message": "Resource not found",
            "data": {"uri": "test://missing"},
        }


async def test_progress_streams_before_the_answer_with_the_clients_own_token(
    tmp_path: Path,
) -> None:
    async with modern_proxy(tmp_path) as (_, client, _log):
        answer = await client.send(
            "tools/call",
            {"name": "progress", "arguments": {"steps": 3}, "_meta": {"progressToken": "tok-9"}},
        )
    assert answer.content_type.startswith("text/event-stream")
    assert [n["params"]["progress"] for n in answer.notes] == [1, 2, 3]
    assert {n["params"]["progressToken"] for n in answer.notes} == {"tok-9"}
    assert answer.result["content"][0]["text"] == "progressed"


async def test_closing_the_response_cancels_the_call_upstream(tmp_path: Path) -> None:
    async with modern_proxy(tmp_path, sse={"keepalive_seconds": 0.2}) as (
        proxy,
        client,
        server_log,
    ):
        message = body("tools/call", {"name": "wait", "arguments": {"seconds": 30}}, 5, {})
        headers = request_headers("tools/call", message["params"])

        async def call() -> None:
            async with client.http.post(proxy.url, json=message, headers=headers) as resp:
                await resp.read()

        def running() -> bool:
            return any(m.get("method") == "tools/call" for m in received(server_log))

        posting = asyncio.create_task(call())
        # Closed once the server has the call (not after a fixed time: under load the
        # call might not have reached it, and there would be nothing to cancel).
        await eventually(running, what="the call upstream")
        posting.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await posting

        def cancelled() -> bool:
            return any(m.get("method") == "notifications/cancelled" for m in received(server_log))

        await eventually(cancelled, what="notifications/cancelled upstream")
        # The session is free again: the next call is answered at once.
        answer = await client.call("wait", {"seconds": 0, "label": "next"})
        assert answer.result["content"][0]["text"] == "waited next"


async def test_modern_disabled_answers_unsupported_version_so_clients_fall_back(
    tmp_path: Path,
) -> None:
    async with modern_proxy(tmp_path, modern={"enabled": False}) as (_, client, _log):
        answer = await client.send("server/discover")
    assert answer.status == 400
    assert answer.error["code"] == -32022
    assert VERSION not in answer.error["data"]["supported"]


async def test_too_many_calls_get_503_and_healthz_shows_the_modern_side(tmp_path: Path) -> None:
    async with modern_proxy(tmp_path, modern={"max_calls": 2}) as (proxy, client, _log):
        waiting = [await client.call("ask", {"question": str(i)}) for i in range(2)]
        assert all(w.result["resultType"] == "input_required" for w in waiting)
        refused = await client.call("wait", {"seconds": 0})
        assert refused.status == 503
        assert refused.error["data"]["reason"] == "too_many_calls"
        async with client.http.get(proxy.base + "/healthz") as resp:
            modern = (await resp.json())["modern"]
        assert modern["calls"] == 2 and modern["awaiting_input"] == 2
        assert modern["pool_sessions"] >= 2  # each waiting call holds a session of its own
        # Answering one frees its place.
        state = waiting[0].result["requestState"]
        (key,) = waiting[0].result["inputRequests"]
        done = await client.send(
            "tools/call",
            {
                "name": "ask",
                "arguments": {},
                "requestState": state,
                "inputResponses": {key: {"action": "decline"}},
            },
        )
        assert done.result["resultType"] == "complete"
        assert (await client.call("wait", {"seconds": 0})).status == 200


async def test_a_server_that_cannot_start_gives_502_and_the_proxy_goes_on(tmp_path: Path) -> None:
    broken = [sys.executable, "-c", "import sys; sys.exit(3)"]
    async with (
        run_proxy(tmp_path, broken, modern={"max_calls": 1}) as proxy,
        aiohttp.ClientSession() as http,
    ):
        client = Modern(http, proxy.url)
        for method, params in [("server/discover", {}), ("prompts/get", {"name": "p"})] * 2:
            answer = await client.send(method, params)  # (max_calls 1: nothing leaks)
            assert answer.status == 502
            assert answer.error["data"]["reason"] == "upstream_start_failed"
            assert answer.body["id"] is not None
        async with http.get(proxy.base + "/healthz") as resp:
            assert resp.status == 200
            assert (await resp.json())["modern"]["pool_sessions"] == 0
