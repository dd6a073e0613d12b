"""The 2025-11-25 Tasks shape for legacy clients that declare ``capabilities.tasks``, over a
legacy server that has no tasks (tests/fixtures/task_server.py): the same engine and
records as the Tasks extension, a smaller façade."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import aiohttp

from tests.downstream.sse_client import RawSession, live_messages
from tests.modern.client import Answer, read_answer
from tests.modern.support import SERVER, modern_proxy, received
from tests.proxy_lives import lives, restartable_redis


async def send(client: RawSession, message: dict[str, Any]) -> Answer:
    async with client.http.post(client.url, json=message, headers=client.headers()) as resp:
        return await read_answer(resp)


async def ask(client: RawSession, rid: Any, method: str, **params: Any) -> Answer:
    return await send(client, {"jsonrpc": "2.0", "id": rid, "method": method, "params": params})


async def legacy(http: aiohttp.ClientSession, url: str, caps: dict[str, Any]) -> RawSession:
    client = RawSession(http, url)
    await client.initialize_with(caps)
    return client


async def test_the_handshake_and_tool_list_offer_tasks_only_to_declaring_clients(
    tmp_path: Path,
) -> None:
    async with modern_proxy(tmp_path) as (proxy, modern, _log):
        with_tasks = await legacy(modern.http, proxy.url, {"tasks": {}})
        plain = await legacy(modern.http, proxy.url, {})
        tools = (await ask(with_tasks, 2, "tools/list")).result["tools"]
        plain_tools = (await ask(plain, 2, "tools/list")).result["tools"]
    assert with_tasks.init_result["capabilities"]["tasks"] == {
        "list": {},
        "cancel": {},
        "requests": {"tools": {"call": {}}},
    }
    assert "tasks" not in plain.init_result["capabilities"]
    assert {t["execution"]["taskSupport"] for t in tools} == {"optional"}
    assert all("execution" not in t for t in plain_tools)


async def test_a_task_augmented_call_get_list_and_result(tmp_path: Path) -> None:
    async with modern_proxy(tmp_path) as (proxy, modern, _log):
        client = await legacy(modern.http, proxy.url, {"tasks": {}})
        created = await ask(
            client,
            3,
            "tools/call",
            name="wait",
            arguments={"seconds": 0.4, "label": "L"},
            task={"ttl": 60_000},
        )
        task = created.result["task"]
        assert task["status"] == "working" and task["ttl"] == 60_000
        assert "pollInterval" in task and task["taskId"]
        got = await ask(client, 4, "tasks/get", taskId=task["taskId"])
        assert got.result["taskId"] == task["taskId"]
        assert got.result["status"] in ("working", "completed")
        listed = await ask(client, 5, "tasks/list")
        assert [t["taskId"] for t in listed.result["tasks"]] == [task["taskId"]]
        result = await ask(client, 6, "tasks/result", taskId=task["taskId"])  # blocks
        assert result.result["content"][0]["text"] == "waited L"
        related = result.result["_meta"]["io.modelcontextprotocol/related-task"]
        assert related == {"taskId": task["taskId"]}
        done = await ask(client, 7, "tasks/get", taskId=task["taskId"])
        assert done.result["status"] == "completed"
        # A finished task cannot be cancelled; another session cannot see it at all.
        refused = await ask(client, 8, "tasks/cancel", taskId=task["taskId"])
        assert refused.error["code"] == -32602
        other = await legacy(modern.http, proxy.url, {"tasks": {}})
        for method in ("tasks/get", "tasks/result", "tasks/cancel"):
            assert (await ask(other, 9, method, taskId=task["taskId"])).error["code"] == -32602
        assert (await ask(other, 10, "tasks/list")).result["tasks"] == []


async def test_a_failed_task_result_is_the_calls_own_error(tmp_path: Path) -> None:
    async with modern_proxy(tmp_path) as (proxy, modern, _log):
        client = await legacy(modern.http, proxy.url, {"tasks": {}})
        task = (await ask(client, 3, "tools/call", name="fail", task={})).result["task"]
        result = await ask(client, 4, "tasks/result", taskId=task["taskId"])
    assert result.error == {"code": -32000, "message": "it failed"}


async def test_cancel_then_result(tmp_path: Path) -> None:
    async with modern_proxy(tmp_path) as (proxy, modern, _log):
        client = await legacy(modern.http, proxy.url, {"tasks": {}})
        task = (
            await ask(client, 3, "tools/call", name="wait", arguments={"seconds": 30}, task={})
        ).result["task"]
        cancelled = await ask(client, 4, "tasks/cancel", taskId=task["taskId"])
        assert cancelled.result["status"] == "cancelled"  # before the answer
        result = await ask(client, 5, "tasks/result", taskId=task["taskId"])
    assert result.error["data"]["reason"] == "task_cancelled"


async def test_elicitation_reaches_the_client_on_tasks_result(tmp_path: Path) -> None:
    async with modern_proxy(tmp_path) as (proxy, modern, _log):
        client = await legacy(modern.http, proxy.url, {"tasks": {}, "elicitation": {}})
        created = await ask(
            client, 3, "tools/call", name="ask", arguments={"question": "Q?"}, task={}
        )
        task_id = created.result["task"]["taskId"]
        for _ in range(100):
            status = (await ask(client, 4, "tasks/get", taskId=task_id)).result["status"]
            if status == "input_required":
                break
            await asyncio.sleep(0.05)
        assert status == "input_required"
        body = {"jsonrpc": "2.0", "id": 5, "method": "tasks/result", "params": {"taskId": task_id}}
        async with client.http.post(client.url, json=body, headers=client.headers()) as resp:
            assert resp.headers["Content-Type"].startswith("text/event-stream")
            final = None
            async for message in live_messages(resp):
                if message.get("method") == "elicitation/create":
                    related = message["params"]["_meta"]["io.modelcontextprotocol/related-task"]
                    assert related == {"taskId": task_id}
                    assert message["params"]["message"] == "Q?"
                    answer = {
                        "jsonrpc": "2.0",
                        "id": message["id"],
                        "result": {"action": "accept", "content": {"answer": "yes"}},
                    }
                    async with client.http.post(
                        client.url, json=answer, headers=client.headers()
                    ) as posted:
                        assert posted.status == 202
                elif "id" in message and message["id"] == 5:
                    final = message
                    break
    assert final is not None
    assert json.loads(final["result"]["content"][0]["text"])["content"] == {"answer": "yes"}


async def test_a_client_without_the_capability_gets_the_plain_call(tmp_path: Path) -> None:
    async with modern_proxy(tmp_path) as (proxy, modern, _log):
        client = await legacy(modern.http, proxy.url, {})
        answer = await ask(client, 3, "tools/call", name="wait", arguments={"seconds": 0}, task={})
    assert answer.result["content"][0]["text"] == "waited "  # the task param is ignored


async def test_task_augmented_calls_follow_the_tool_rules(tmp_path: Path) -> None:
    """docs/tools.md: a hidden tool called as a task is refused as an unknown tool, and a
    renamed one runs as a task under the server's own name."""
    rules = {"tools": {"rename": {"wait": "pause"}, "deny": ["fail*"]}}
    async with modern_proxy(tmp_path, upstream=rules) as (proxy, modern, log):
        client = await legacy(modern.http, proxy.url, {"tasks": {}})
        for rid, name in enumerate(("wait", "fail"), start=3):
            refused = await ask(client, rid, "tools/call", name=name, arguments={}, task={})
            assert refused.error == {"code": -32602, "message": f"Unknown tool: {name}"}
        created = await ask(
            client, 9, "tools/call", name="pause", arguments={"seconds": 0, "label": "R"}, task={}
        )
        task_id = created.result["task"]["taskId"]
        result = await ask(client, 10, "tasks/result", taskId=task_id)
        assert result.result["content"][0]["text"] == "waited R"
    calls = [m["params"]["name"] for m in received(log) if m.get("method") == "tools/call"]
    assert calls == ["wait"]


async def test_a_task_request_while_the_store_restarts_waits_for_it(tmp_path: Path) -> None:
    """Redis is down for a moment when a 2025-11-25 task request comes: the call has
    begun upstream, so its record is written once the store is back (within
    ``store.unavailable_wait_seconds``), and the task runs to its answer. Was: refused at
    once with 503 ``store_unavailable``, the begun call cancelled upstream."""
    with restartable_redis(tmp_path, unavailable_wait_seconds=10.0) as (server, store):
        async with lives(tmp_path, store) as (proxies, http):
            proxies.command = SERVER
            proxy = await proxies.start()
            client = await legacy(http, proxy.url, {"tasks": {}})
            server.stop()
            args = {"seconds": 0.2, "label": "L"}
            asking = asyncio.ensure_future(
                ask(client, 3, "tools/call", name="wait", arguments=args, task={})
            )
            await asyncio.sleep(0.5)  # the request waits for the store
            assert not asking.done()
            server.start()
            created = await asking
            assert created.status == 200, created.body
            task = created.result["task"]
            result = await ask(client, 4, "tasks/result", taskId=task["taskId"])
            assert result.result["content"][0]["text"] == "waited L"


async def test_a_task_that_ends_while_the_store_is_down_is_recorded_once_it_is_back(
    tmp_path: Path,
) -> None:
    """Redis goes down under a running 2025-11-25 task and stays down past its end (five
    seconds): the task's final record is written once the store is back, so ``tasks/get``
    (answered from the store once this replica has handed the task over) says
    ``completed``. Was: the write was given up after five tries over three seconds, and
    the store kept saying ``working`` until the task expired."""
    with restartable_redis(tmp_path, unavailable_wait_seconds=10.0) as (server, store):
        async with lives(tmp_path, store) as (proxies, http):
            proxies.command = SERVER
            proxy = await proxies.start()
            client = await legacy(http, proxy.url, {"tasks": {}})
            args = {"seconds": 0.5, "label": "L"}
            created = await ask(client, 3, "tools/call", name="wait", arguments=args, task={})
            assert created.status == 200, created.body
            task_id = created.result["task"]["taskId"]
            server.stop()
            await asyncio.sleep(5.0)  # the task ends meanwhile; its record cannot land
            server.start()
            status = ""
            for rid in range(100, 200):
                got = await ask(client, rid, "tasks/get", taskId=task_id)
                status = got.result["status"] if got.result else str(got.body)
                if status == "completed":
                    break
                await asyncio.sleep(0.1)
            assert status == "completed"
            result = await ask(client, 300, "tasks/result", taskId=task_id)
            assert result.result["content"][0]["text"] == "waited L"
