"""Every client path behind a balancer with no stickiness (issue 19, items 1-3): two
replicas on one real Redis, and each request sent to the replica that does not hold what
it names works exactly as on the holder.

- an MRTR retry (2026-07-28) reaching the other replica continues the call parked on the
  first (the ``requestState`` names its holder); the holder gone, ``owner_lost``;
- legacy 2025-11-25 tasks of a session held by A, served by B;
- ``/ws`` on B for a session A holds, and a resume token of A's on a ``/ws`` of B's.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import aiohttp
import redis.asyncio as aioredis

from tests.downstream.sse_client import RawSession
from tests.modern.client import Answer, Modern, read_answer
from tests.modern.support import SERVER
from tests.proxy_lives import Proxy, lives, shared
from tests.support import eventually, log_events


async def ask(client: RawSession, rid: int, method: str, **params: Any) -> Answer:
    message = {"jsonrpc": "2.0", "id": rid, "method": method, "params": params}
    async with client.http.post(client.url, json=message, headers=client.headers()) as resp:
        return await read_answer(resp)


async def legacy(http: aiohttp.ClientSession, url: str, caps: dict[str, Any]) -> RawSession:
    client = RawSession(http, url)
    await client.initialize_with(caps)
    return client


ACCEPT = {"action": "accept", "content": {"answer": "yes"}}


def _owner(proxy: Proxy) -> str:
    (started,) = log_events(proxy.log_path.read_text(), "replica_started")
    return str(started["owner"])


def _retry(state: str, key: str, answer: str) -> dict[str, object]:
    return {
        "name": "ask_twice",
        "arguments": {},
        "requestState": state,
        "inputResponses": {key: {"action": "accept", "content": {"answer": answer}}},
    }


async def test_an_mrtr_retry_on_the_other_replica_continues_the_call(
    tmp_path: Path, redis_url: str
) -> None:
    async with lives(tmp_path, shared(redis_url)) as (proxies, http):
        proxies.command = SERVER
        a, b = await asyncio.gather(proxies.start(), proxies.start())
        on_a, on_b = Modern(http, a.url), Modern(http, b.url)
        first = await on_a.call("ask_twice")
        assert first.result["resultType"] == "input_required"
        (key,) = first.result["inputRequests"]
        second = await on_b.send("tools/call", _retry(first.result["requestState"], key, "A"))
        assert second.result["resultType"] == "input_required", second.body
        (key2,) = second.result["inputRequests"]
        assert second.result["inputRequests"][key2]["params"]["message"] == "two"
        done = await on_b.send("tools/call", _retry(second.result["requestState"], key2, "B"))
        answers = json.loads(done.result["content"][0]["text"])
        assert [a["content"]["answer"] for a in answers] == ["A", "B"]
        assert b.upstream_pids() == []  # B ran nothing: A's call answered through it


async def test_an_mrtr_retry_for_a_dead_holder_gets_owner_lost(
    tmp_path: Path, redis_url: str
) -> None:
    async with lives(tmp_path, shared(redis_url, lease=1.0)) as (proxies, http):
        proxies.command = SERVER
        a, b = await asyncio.gather(proxies.start(), proxies.start())
        first = await Modern(http, a.url).call("ask_twice")
        (key,) = first.result["inputRequests"]
        owner = _owner(a)
        await proxies.kill(a)
        redis = aioredis.from_url(redis_url)
        try:  # its lease lapses (whatever the key layout, its name is in the key)
            await eventually(
                lambda: _none(redis.keys(f"*replica:{owner}*")),
                what=f"the lease of {owner} to lapse",
            )
        finally:
            await redis.aclose()
        lost = await Modern(http, b.url).send(
            "tools/call", _retry(first.result["requestState"], key, "A")
        )
        assert lost.error["code"] == -32000, lost.body
        assert lost.error["data"] == {"reason": "owner_lost"}


async def _none(keys: object) -> bool:
    return not await keys  # type: ignore[misc]


async def test_legacy_tasks_of_a_session_on_a_are_served_by_b(
    tmp_path: Path, redis_url: str
) -> None:
    async with lives(tmp_path, shared(redis_url)) as (proxies, http):
        proxies.command = SERVER
        a, b = await asyncio.gather(proxies.start(), proxies.start())
        on_a = await legacy(http, a.url, {"tasks": {}, "elicitation": {}})
        on_b = RawSession(http, b.url, session_id=on_a.session_id)
        # Created through B (the holder runs it), then read through B from the store.
        created = await ask(
            on_b, 3, "tools/call", name="ask", arguments={"question": "Q?"}, task={}
        )
        task_id = created.result["task"]["taskId"]
        got = await ask(on_b, 4, "tasks/get", taskId=task_id)
        assert got.result["taskId"] == task_id and got.result["status"] != "failed", got.body
        listed = await ask(on_b, 5, "tasks/list")
        assert [t["taskId"] for t in listed.result["tasks"]] == [task_id]
        # tasks/result on B: the question comes on its stream, the answer goes to B too.
        body = {"jsonrpc": "2.0", "id": 6, "method": "tasks/result", "params": {"taskId": task_id}}
        async with http.post(b.url, json=body, headers=on_b.headers()) as resp:
            assert resp.headers["Content-Type"].startswith("text/event-stream")
            final = None
            async for line in resp.content:
                if not line.startswith(b"data: ") or not line[6:].strip():
                    continue
                message = json.loads(line[6:])
                if message.get("method") == "elicitation/create":
                    related = message["params"]["_meta"]["io.modelcontextprotocol/related-task"]
                    assert related == {"taskId": task_id}
                    answer = {"jsonrpc": "2.0", "id": message["id"], "result": ACCEPT}
                    async with http.post(b.url, json=answer, headers=on_b.headers()) as posted:
                        assert posted.status == 202
                elif message.get("id") == 6:
                    final = message
                    break
        assert final is not None, "tasks/result ended without its answer"
        assert json.loads(final["result"]["content"][0]["text"])["content"] == {"answer": "yes"}
        assert (await ask(on_b, 7, "tasks/get", taskId=task_id)).result["status"] == "completed"
        # Cancel through B reaches the replica running the task; a finished one is refused.
        slow = await ask(on_b, 8, "tools/call", name="wait", arguments={"seconds": 30}, task={})
        slow_id = slow.result["task"]["taskId"]
        cancelled = await ask(on_b, 9, "tasks/cancel", taskId=slow_id)
        assert cancelled.result["status"] == "cancelled", cancelled.body
        result = await ask(on_b, 10, "tasks/result", taskId=slow_id)
        assert result.error["data"]["reason"] == "task_cancelled"
        assert (await ask(on_b, 11, "tasks/cancel", taskId=task_id)).error["code"] == -32602
        # Another session sees none of them, on either replica.
        other = RawSession(
            http, b.url, session_id=(await legacy(http, a.url, {"tasks": {}})).session_id
        )
        for method in ("tasks/get", "tasks/result", "tasks/cancel"):
            assert (await ask(other, 12, method, taskId=task_id)).error["code"] == -32602
        assert (await ask(other, 13, "tasks/list")).result["tasks"] == []
        assert b.upstream_pids() == []
