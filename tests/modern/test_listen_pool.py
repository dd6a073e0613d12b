"""``subscriptions/listen`` and the pool of upstream sessions (shared and per_request)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from tests.modern.client import body, request_headers
from tests.modern.support import modern_proxy, received
from tests.support import alive, eventually


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
