"""The 2026-07-28 façade end to end: a raw modern client, the proxy as a process, and a
legacy stdio server (tests/fixtures/task_server.py) that asks the legacy way.

Dual era on one endpoint, the spec's errors, discovery, MRTR, cancellation by closing the
response, subscriptions/listen, and the pool.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from tests.modern.client import VERSION, Modern, body, read_answer, request_headers
from tests.support import (
    ROOT,
    RunningProxy,
    alive,
    eventually,
    initialize_request,
    run_proxy,
)

SERVER = [sys.executable, str(ROOT / "tests" / "fixtures" / "task_server.py")]


@contextlib.asynccontextmanager
async def modern_proxy(
    tmp_path: Path, **sections: dict[str, Any]
) -> AsyncIterator[tuple[RunningProxy, Modern, Path]]:
    """The proxy in front of the task fixture; the fixture logs what it receives."""
    server_log = tmp_path / "server.log"
    upstream = {"env": {"TASK_SERVER_LOG": str(server_log)}}
    async with (
        run_proxy(tmp_path, SERVER, upstream=upstream, **sections) as proxy,
        aiohttp.ClientSession() as http,
    ):
        yield proxy, Modern(http, proxy.url), server_log


def received(server_log: Path) -> list[dict[str, Any]]:
    if not server_log.exists():
        return []
    return [json.loads(line.split(" ", 1)[1]) for line in server_log.read_text().splitlines()]


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


async def test_mrtr_elicitation_continues_the_same_upstream_call(tmp_path: Path) -> None:
    async with modern_proxy(tmp_path) as (_, client, server_log):
        first = await client.call("ask_twice")
        assert first.result["resultType"] == "input_required"
        (key,) = first.result["inputRequests"]
        assert first.result["inputRequests"][key]["method"] == "elicitation/create"
        assert first.result["inputRequests"][key]["params"]["message"] == "one"
        state = first.result["requestState"]
        # A retry without the answer gets the same question again (spec: ask anew).
        again = await client.send(
            "tools/call",
            {"name": "ask_twice", "arguments": {}, "requestState": state, "inputResponses": {}},
        )
        assert again.result["resultType"] == "input_required"
        assert list(again.result["inputRequests"]) == [key]
        second = await client.send(
            "tools/call",
            {
                "name": "ask_twice",
                "arguments": {},
                "requestState": again.result["requestState"],
                "inputResponses": {key: {"action": "accept", "content": {"answer": "A"}}},
            },
        )
        assert second.result["resultType"] == "input_required"
        (key2,) = second.result["inputRequests"]
        assert key2 != key  # keys are unique over the call's life
        done = await client.send(
            "tools/call",
            {
                "name": "ask_twice",
                "arguments": {},
                "requestState": second.result["requestState"],
                "inputResponses": {key2: {"action": "accept", "content": {"answer": "B"}}},
            },
        )
        answers = json.loads(done.result["content"][0]["text"])
        assert [a["content"]["answer"] for a in answers] == ["A", "B"]
    calls = [m for m in received(server_log) if m.get("method") == "tools/call"]
    assert len(calls) == 1  # one upstream call served all four client requests


async def test_sampling_and_roots_through_mrtr(tmp_path: Path) -> None:
    async with modern_proxy(tmp_path) as (_, client, _log):
        for tool, method, reply in [
            (
                "sample",
                "sampling/createMessage",
                {"role": "assistant", "content": {"type": "text", "text": "hello"}, "model": "m"},
            ),
            ("roots", "roots/list", {"roots": [{"uri": "file:///w"}]}),
        ]:
            first = await client.call(tool)
            ((key, request),) = first.result["inputRequests"].items()
            assert request["method"] == method
            done = await client.send(
                "tools/call",
                {
                    "name": tool,
                    "arguments": {},
                    "requestState": first.result["requestState"],
                    "inputResponses": {key: reply},
                },
            )
            assert json.loads(done.result["content"][0]["text"]) == reply


async def test_tampered_foreign_or_stale_request_state_never_gets_another_calls_answer(
    tmp_path: Path,
) -> None:
    async with modern_proxy(tmp_path, modern={"input_ttl_seconds": 1.0}) as (_, client, _log):
        first = await client.call("ask", {"question": "q"})
        state = first.result["requestState"]
        (key,) = first.result["inputRequests"]
        answer = {key: {"action": "accept", "content": {"answer": "x"}}}
        payload, sig = state.split(".")
        tampered = payload[:-2] + ("AA" if payload[-2:] != "AA" else "BB") + "." + sig
        for bad, tool in [(tampered, "ask"), ("garbage", "ask"), (state, "ask_twice")]:
            refused = await client.send(
                "tools/call",
                {"name": tool, "arguments": {}, "requestState": bad, "inputResponses": answer},
            )
            assert refused.error["code"] == -32602, refused.body
        # The genuine state still works once, then it is spent.
        ok = await client.send(
            "tools/call",
            {"name": "ask", "arguments": {}, "requestState": state, "inputResponses": answer},
        )
        assert ok.result["resultType"] == "complete"
        spent = await client.send(
            "tools/call",
            {"name": "ask", "arguments": {}, "requestState": state, "inputResponses": answer},
        )
        assert spent.error["code"] == -32602
        # Stale: nobody answered within modern.input_ttl_seconds; the call was cancelled.
        late = await client.call("ask", {"question": "late"})
        await asyncio.sleep(1.3)
        stale = await client.send(
            "tools/call",
            {
                "name": "ask",
                "arguments": {},
                "requestState": late.result["requestState"],
                "inputResponses": answer,
            },
        )
        assert stale.error["code"] == -32602


async def test_input_the_client_did_not_declare_is_refused_upstream_and_may_be_32021(
    tmp_path: Path,
) -> None:
    async with modern_proxy(tmp_path) as (_, client, _log):
        # The server hears the refusal a legacy client would give, and carries on ...
        carried_on = await client.call("ask", {"question": "q"}, caps={})
        # ... or fails: then the client learns what it lacked.
        failed = await client.call("need_sample", caps={"elicitation": {}})
    refusal = json.loads(carried_on.result["content"][0]["text"])
    assert refusal["code"] == -32601
    assert failed.status == 400
    assert failed.error["code"] == -32021
    assert failed.error["data"]["requiredCapabilities"] == {"sampling": {}}


async def test_closing_the_response_cancels_the_call_upstream(tmp_path: Path) -> None:
    async with modern_proxy(tmp_path, sse={"keepalive_seconds": 0.2}) as (
        proxy,
        client,
        server_log,
    ):
        message = body("tools/call", {"name": "wait", "arguments": {"seconds": 30}}, 5, {})
        headers = request_headers("tools/call", message["params"])
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(0.7):
                async with client.http.post(proxy.url, json=message, headers=headers) as resp:
                    await resp.read()

        def cancelled() -> bool:
            return any(m.get("method") == "notifications/cancelled" for m in received(server_log))

        await eventually(cancelled, what="notifications/cancelled upstream")
        # The session is free again: the next call is answered at once.
        answer = await client.call("wait", {"seconds": 0, "label": "next"})
        assert answer.result["content"][0]["text"] == "waited next"


@pytest.mark.parametrize("isolation", ["shared", "per_request"])
async def test_listen_acknowledges_filters_and_delivers_tagged_changes(
    tmp_path: Path, isolation: str
) -> None:
    pool = {"pool": {"isolation": isolation}}
    async with modern_proxy(tmp_path, modern=pool) as (proxy, client, server_log):
        params = {
            "notifications": {
                "toolsListChanged": True,
                "promptsListChanged": True,  # the fixture has no prompts: left out of the ack
                "resourceSubscriptions": ["test://watched"],
            }
        }
        message = body("subscriptions/listen", params, "listen-1", {})
        headers = request_headers("subscriptions/listen", message["params"])
        async with client.http.post(proxy.url, json=message, headers=headers) as resp:
            assert resp.headers["Content-Type"].startswith("text/event-stream")
            assert resp.headers["X-Accel-Buffering"] == "no"
            lines = resp.content

            async def next_message() -> dict[str, Any]:
                async for line in lines:
                    if line.startswith(b"data: "):
                        return dict(json.loads(line[6:]))
                raise AssertionError("the listen stream ended")

            ack = await next_message()
            assert ack["method"] == "notifications/subscriptions/acknowledged"
            assert ack["params"]["notifications"] == {
                "toolsListChanged": True,
                "resourceSubscriptions": ["test://watched"],
            }
            assert ack["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"] == "listen-1"

            def subscribed() -> bool:
                return any(m.get("method") == "resources/subscribe" for m in received(server_log))

            await eventually(subscribed, what="resources/subscribe made upstream")
            await client.call("touch", {"uri": "test://watched"})
            if isolation == "shared":
                got = [await next_message(), await next_message()]
                assert sorted(m["method"] for m in got) == [
                    "notifications/resources/updated",
                    "notifications/tools/list_changed",
                ]
            else:  # the call ran in a fresh process, where nothing is subscribed
                got = [await next_message()]
                assert got[0]["method"] == "notifications/tools/list_changed"
            for m in got:
                assert m["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"] == "listen-1"

        def unsubscribed() -> bool:
            return any(m.get("method") == "resources/unsubscribe" for m in received(server_log))

        await eventually(unsubscribed, what="resources/unsubscribe once the listener left")


async def test_listening_for_tasks_needs_the_extension(tmp_path: Path) -> None:
    async with modern_proxy(tmp_path) as (_, client, _log):
        answer = await client.send(
            "subscriptions/listen", {"notifications": {"taskIds": ["x"]}}, caps={}
        )
    assert answer.status == 400 and answer.error["code"] == -32021


async def test_the_pool_reuses_idle_sessions_and_grows_to_its_size(tmp_path: Path) -> None:
    async with modern_proxy(tmp_path, modern={"pool": {"size": 2}}) as (_, client, _log):
        pids = {(await client.call("whoami")).result["content"][0]["text"] for _ in range(5)}
        assert len(pids) == 1  # sequential calls find the first session idle
        slow = [client.call("wait", {"seconds": 0.5}) for _ in range(3)]
        who = client.call("whoami")
        await asyncio.gather(*slow, who)
        pids |= {(await client.call("whoami")).result["content"][0]["text"]}
    assert len(pids) <= 2


async def test_per_request_isolation_gives_every_request_a_fresh_server(tmp_path: Path) -> None:
    async with modern_proxy(tmp_path, modern={"pool": {"isolation": "per_request"}}) as (
        proxy,
        client,
        _log,
    ):
        pids = [(await client.call("whoami")).result["content"][0]["text"] for _ in range(3)]
        assert len(set(pids)) == 3
        # Each was stopped once answered.
        await eventually(lambda: not any(alive(int(p)) for p in pids), what="servers stopped")
    del proxy


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
        run_proxy(tmp_path, broken) as proxy,
        aiohttp.ClientSession() as http,
    ):
        client = Modern(http, proxy.url)
        for _ in range(2):
            answer = await client.send("server/discover")
            assert answer.status == 502
            assert answer.error["data"]["reason"] == "upstream_start_failed"
            assert answer.body["id"] is not None
        async with http.get(proxy.base + "/healthz") as resp:
            assert resp.status == 200
            assert (await resp.json())["modern"]["pool_sessions"] == 0
