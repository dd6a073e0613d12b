"""Every client path behind a balancer with no stickiness (issue 19, items 1-3): two
replicas on one real Redis, and each request sent to the replica that does not hold what
it names works exactly as on the holder.

- an MRTR retry (2026-07-28) reaching the other replica continues the call parked on the
  first (the ``requestState`` names its holder); the holder gone, ``owner_lost``;
- legacy 2025-11-25 tasks of a session held by A, served by B;
- ``/ws`` on B for a session A holds, and a resume token of A's on a ``/ws`` of B's.
"""

from __future__ import annotations

import json
from pathlib import Path

import redis.asyncio as aioredis

from tests.modern.client import Modern
from tests.modern.support import SERVER
from tests.proxy_lives import Proxy, lives, shared
from tests.support import eventually, log_events


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
        a, b = await proxies.start(), await proxies.start()
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
        a, b = await proxies.start(), await proxies.start()
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
