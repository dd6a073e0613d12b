"""The Tasks extension over a legacy server: a long ``tools/call`` becomes durable work.

A raw client (no SDK ships a Tasks-extension client yet) against the proxy process in
front of tests/fixtures/task_server.py: creation per ``tasks.mode``, polling on a new
connection, input through ``tasks/update``, cancellation, failed and ``isError`` calls,
expiry, ``notifications/tasks``, a restart on SQLite and a second replica on Redis.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from tests.modern.client import TASKS, Answer, Modern, body, request_headers
from tests.modern.support import SERVER, modern_proxy, received
from tests.proxy_lives import lives, shared
from tests.support import eventually


async def poll(
    client: Modern, task_id: str, until: set[str], timeout: float = 20.0
) -> dict[str, Any]:
    """``tasks/get`` until the status is one of ``until``; the last result."""
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        got = await client.task("tasks/get", task_id)
        assert got.status == 200, got.body
        result = got.result
        assert result["resultType"] == "complete"
        if result["status"] in until:
            return result
        assert asyncio.get_running_loop().time() < deadline, result
        await asyncio.sleep(0.05)


async def test_a_slow_call_becomes_a_task_that_outlives_the_connection(tmp_path: Path) -> None:
    async with modern_proxy(tmp_path, tasks={"mode": "after_ms", "after_ms": 200}) as (
        proxy,
        client,
        _log,
    ):
        fast = await client.call("wait", {"seconds": 0, "label": "fast"})
        assert fast.result["resultType"] == "complete"  # fast calls stay plain
        created = await client.call("wait", {"seconds": 1.0, "label": "slow"})
        task = created.result
        assert task["resultType"] == "task"
        assert task["status"] == "working"
        assert task["ttlMs"] == 3_600_000 and task["pollIntervalMs"] == 1000
        assert len(task["taskId"]) >= 32
        assert task["createdAt"].endswith("Z") and task["lastUpdatedAt"].endswith("Z")
        # The handle is only returned once tasks/get resolves it.
        async with aiohttp.ClientSession() as other:  # a new connection
            again = Modern(other, proxy.url)
            first = await again.task("tasks/get", task["taskId"])
            assert first.result["status"] in ("working", "completed")
            done = await poll(again, task["taskId"], {"completed"})
    assert done["result"]["content"][0]["text"] == "waited slow"
    assert done["result"]["resultType"] == "complete"
    assert done["createdAt"] == task["createdAt"]


async def test_mode_always_and_never_and_a_client_without_the_extension(tmp_path: Path) -> None:
    async with modern_proxy(tmp_path, tasks={"mode": "always"}) as (_, client, _log):
        assert (await client.call("wait", {"seconds": 0})).result["resultType"] == "task"
        plain = await client.call("wait", {"seconds": 0}, caps={})
        assert plain.result["resultType"] == "complete"
        listed = await client.send("tools/list")
        assert listed.result["resultType"] == "complete"  # only tools/call becomes a task
    async with modern_proxy(tmp_path, tasks={"mode": "never"}) as (_, client, _log):
        slow = await client.call("wait", {"seconds": 0.3})
        assert slow.result["resultType"] == "complete"


async def test_elicitation_through_tasks_update(tmp_path: Path) -> None:
    async with modern_proxy(tmp_path, tasks={"mode": "always"}) as (_, client, _log):
        created = (await client.call("ask_twice")).result
        task_id = created["taskId"]
        asked = await poll(client, task_id, {"input_required"})
        ((key, request),) = asked["inputRequests"].items()
        assert request["method"] == "elicitation/create"
        assert request["params"]["message"] == "one"
        # Unknown keys are ignored; the ack is empty.
        ack = await client.task(
            "tasks/update",
            task_id,
            inputResponses={
                "nope": {"action": "decline"},
                key: {"action": "accept", "content": {"answer": "A"}},
            },
        )
        assert ack.result == {"resultType": "complete"}
        second = await poll(client, task_id, {"input_required"})
        while key in second["inputRequests"]:
            second = await poll(client, task_id, {"input_required"})
        ((key2, _),) = second["inputRequests"].items()
        await client.task(
            "tasks/update",
            task_id,
            inputResponses={key2: {"action": "accept", "content": {"answer": "B"}}},
        )
        # A key answered before is ignored, not an error.
        late = await client.task(
            "tasks/update", task_id, inputResponses={key: {"action": "accept", "content": {}}}
        )
        assert late.result == {"resultType": "complete"}
        done = await poll(client, task_id, {"completed"})
    answers = json.loads(done["result"]["content"][0]["text"])
    assert [a["content"]["answer"] for a in answers] == ["A", "B"]
    assert "inputRequests" not in done


async def test_cancel_stops_the_call_upstream(tmp_path: Path) -> None:
    async with modern_proxy(tmp_path, tasks={"mode": "always"}) as (_, client, server_log):
        task_id = (await client.call("wait", {"seconds": 30})).result["taskId"]
        ack = await client.task("tasks/cancel", task_id)
        assert ack.result == {"resultType": "complete"}
        done = await poll(client, task_id, {"cancelled"})
        assert "result" not in done and "error" not in done

        def cancelled() -> bool:
            return any(m.get("method") == "notifications/cancelled" for m in received(server_log))

        await eventually(cancelled, what="notifications/cancelled upstream")
        unknown = await client.task("tasks/cancel", "no-such-task")
        assert unknown.error["code"] == -32602


async def test_failed_and_is_error_calls(tmp_path: Path) -> None:
    async with modern_proxy(tmp_path, tasks={"mode": "always"}) as (_, client, _log):
        failed_id = (await client.call("fail")).result["taskId"]
        bad_id = (await client.call("bad")).result["taskId"]
        failed = await poll(client, failed_id, {"failed", "completed"})
        bad = await poll(client, bad_id, {"failed", "completed"})
    assert failed["status"] == "failed"
    assert failed["error"] == {"code": -32000, "message": "it failed"}
    assert bad["status"] == "completed"  # a tool error is a result, not a failure
    assert bad["result"]["isError"] is True


async def test_a_task_whose_server_crashes_fails_with_the_reason(tmp_path: Path) -> None:
    async with modern_proxy(
        tmp_path, tasks={"mode": "always"}, modern={"pool": {"size": 1, "max_size": 1}}
    ) as (
        proxy,
        client,
        _log,
    ):
        task_id = (await client.call("wait", {"seconds": 30})).result["taskId"]
        pid = int((await client.call("whoami", caps={})).result["content"][0]["text"])
        os.kill(pid, signal.SIGKILL)
        failed = await poll(client, task_id, {"failed"})
    assert failed["error"]["data"]["reason"] == "upstream_closed"
    del proxy


async def test_unknown_and_expired_tasks_are_32602(tmp_path: Path) -> None:
    async with modern_proxy(tmp_path, tasks={"mode": "always", "ttl_seconds": 0.5}) as (
        _,
        client,
        server_log,
    ):
        unknown = await client.task("tasks/get", "x" * 32)
        assert unknown.status == 400 and unknown.error["code"] == -32602
        created = (await client.call("wait", {"seconds": 30})).result
        assert created["ttlMs"] == 500

        async def gone() -> Answer | None:
            answer = await client.task("tasks/get", created["taskId"])
            return answer if "error" in answer.body else None

        # Known until its ttl (tasks/get does not extend it), then not at all.
        expired = await eventually(gone, interval=0.1, what="the task to expire (ttl 0.5 s)")
        assert expired.error["code"] == -32602

        def cancelled() -> bool:
            return any(m.get("method") == "notifications/cancelled" for m in received(server_log))

        await eventually(cancelled, what="the expired task's call cancelled upstream")


async def test_listen_delivers_notifications_tasks_for_named_tasks(tmp_path: Path) -> None:
    async with modern_proxy(tmp_path, tasks={"mode": "always"}) as (proxy, client, _log):
        task_id = (await client.call("wait", {"seconds": 0.5, "label": "n"})).result["taskId"]
        params = {"notifications": {"taskIds": [task_id, "unknown-task"]}}
        message = body("subscriptions/listen", params, "L", TASKS)
        headers = request_headers("subscriptions/listen", message["params"])
        async with client.http.post(proxy.url, json=message, headers=headers) as resp:
            seen: list[dict[str, Any]] = []
            async for line in resp.content:
                if not line.startswith(b"data: "):
                    continue
                seen.append(json.loads(line[6:]))
                if seen[-1].get("params", {}).get("status") == "completed":
                    break
    ack = seen[0]
    assert ack["method"] == "notifications/subscriptions/acknowledged"
    assert ack["params"]["notifications"] == {"taskIds": [task_id]}
    final = seen[-1]
    assert final["method"] == "notifications/tasks"
    assert final["params"]["taskId"] == task_id
    assert final["params"]["result"]["content"][0]["text"] == "waited n"
    assert final["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"] == "L"


async def test_tasks_survive_a_restart_on_sqlite_and_running_ones_fail_clearly(
    tmp_path: Path,
) -> None:
    async with lives(tmp_path) as (proxies, http):
        proxies.command = SERVER
        proxies.extra = {"tasks": {"mode": "always"}}
        first = await proxies.start()
        client = Modern(http, first.url)
        finished = (await client.call("wait", {"seconds": 0, "label": "kept"})).result["taskId"]
        await poll(client, finished, {"completed"})
        running = (await client.call("wait", {"seconds": 60})).result["taskId"]
        await proxies.kill(first)
        second = await proxies.start()
        client = Modern(http, second.url)
        kept = await poll(client, finished, {"completed"})
        assert kept["result"]["content"][0]["text"] == "waited kept"
        lost = await poll(client, running, {"failed"})
        assert lost["error"]["data"]["reason"] == "proxy_restarted"
        assert "restarted" in lost["statusMessage"]


@pytest.mark.parametrize("act", ["get", "update", "cancel"])
async def test_any_replica_answers_for_a_task_and_forwards_to_its_owner(
    tmp_path: Path, redis_url: str, act: str
) -> None:
    async with lives(tmp_path, shared(redis_url)) as (proxies, http):
        proxies.command = SERVER
        proxies.extra = {"tasks": {"mode": "always"}}
        a, b = await proxies.start(), await proxies.start()
        on_a, on_b = Modern(http, a.url), Modern(http, b.url)
        if act == "get":
            task_id = (await on_a.call("wait", {"seconds": 0.3, "label": "r"})).result["taskId"]
            done = await poll(on_b, task_id, {"completed"})
            assert done["result"]["content"][0]["text"] == "waited r"
        elif act == "update":
            task_id = (await on_a.call("ask", {"question": "q"})).result["taskId"]
            asked = await poll(on_b, task_id, {"input_required"})
            (key,) = asked["inputRequests"]
            reply = {key: {"action": "accept", "content": {"answer": "via B"}}}
            await on_b.task("tasks/update", task_id, inputResponses=reply)
            done = await poll(on_b, task_id, {"completed"})
            assert "via B" in done["result"]["content"][0]["text"]
        else:
            task_id = (await on_a.call("wait", {"seconds": 30})).result["taskId"]
            await on_b.task("tasks/cancel", task_id)
            await poll(on_b, task_id, {"cancelled"})


async def test_past_max_running_a_call_stays_plain(tmp_path: Path) -> None:
    tasks = {"mode": "after_ms", "after_ms": 100, "max_running": 1}
    async with modern_proxy(tmp_path, tasks=tasks) as (_, client, _log):
        first = await client.call("wait", {"seconds": 30})
        assert first.result["resultType"] == "task"
        second = await client.call("wait", {"seconds": 0.4, "label": "plain"})
        assert second.result["resultType"] == "complete"
        assert second.result["content"][0]["text"] == "waited plain"
        await client.task("tasks/cancel", first.result["taskId"])
