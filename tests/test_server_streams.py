"""Stored streams belong to the server whose path their session was made on (issue 19,
item 4), as they belong to its principal.

Real proxy processes fronting two servers, ``a`` and ``b`` (the same fixture under two
names), with no authentication: every request is the same principal (nobody). After a
restart on SQLite (the session is gone, its stream is in the file), and on two replicas
sharing Redis (the session is on the other replica), the stream of a session made at
``/servers/a/mcp`` is refused at ``/servers/b/mcp`` exactly as a stream that never
existed (``GET`` + ``Last-Event-ID``: the same ``404`` and body as an unknown session's;
``stream/poll`` / ``stream/resume`` with its real resume token: the same error as a
stream that never existed), and served at ``/servers/a/mcp`` as before.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import aiohttp

from proxy.core.sse import SSEEvent
from tests.downstream.sse_client import RawSession, messages, read_events
from tests.proxy_lives import Lives, Proxy, lives, progress_of, read_some, shared
from tests.support import FIXTURE, tool_call

UNKNOWN_SESSION = "0" * 32  # a session id nobody has


def two_servers(proxies: Lives) -> None:
    """Make every life of ``proxies`` front servers ``a`` and ``b`` instead of one."""
    one_server = proxies.config

    def config() -> dict[str, Any]:
        made = one_server()
        made["upstream"] = {"stop_grace_seconds": 1}  # defaults for both
        made["servers"] = {"a": {"command": FIXTURE}, "b": {"command": FIXTURE}}
        return made

    proxies.config = config  # type: ignore[method-assign]


def at(proxy: Proxy, server: str) -> str:
    return proxy.url.removesuffix("/mcp") + f"/servers/{server}/mcp"


async def cut_call(
    http: aiohttp.ClientSession, url: str, steps: int
) -> tuple[RawSession, list[dict[str, Any]], str, dict[str, Any]]:
    """A seeded session at ``url`` and a slow call it is cut from after its announcement
    and two progress notifications: (session, received, last event id, stream reference)."""
    client = RawSession(http, url)
    await client.initialize_with({"streams": {}})
    call = tool_call(3, "slow", {"steps": steps, "delay": 0.02}, "p")
    resp = await http.post(url, json=call, headers=client.headers())
    assert resp.status == 200, await resp.text()
    received, last_id = await read_some(resp, 3)
    resp.close()
    create = received[0]["params"]["stream"]
    ref = {"streamId": create["streamId"], "resumeToken": create["resumeToken"]}
    return client, received, last_id, ref


async def get_refusal(http: aiohttp.ClientSession, url: str, headers: dict[str, str]) -> Any:
    async with http.get(url, headers=headers) as resp:
        return resp.status, await resp.json()


async def assert_refused_like_unknown(
    http: aiohttp.ClientSession, url: str, client: RawSession, last_id: str, ref: dict[str, Any]
) -> None:
    """At ``url`` (another server's path), the stream reads as one that does not exist."""
    resume = client.headers(**{"Last-Event-ID": last_id})
    stolen = await get_refusal(http, url, resume)
    unknown = await get_refusal(http, url, {**resume, "Mcp-Session-Id": UNKNOWN_SESSION})
    assert stolen[0] == 404, stolen
    assert stolen == unknown
    other = RawSession(http, url)
    await other.initialize_with({"streams": {}})
    epoch = ref["streamId"].rpartition(".")[0]
    never = {**ref, "streamId": f"{epoch}.999"}
    for rid, method in enumerate(("stream/poll", "stream/resume"), start=10):
        (wrong,) = messages(await other.request(rid, method, {**ref, "lastEventId": last_id}))
        (none,) = messages(await other.request(rid, method, never))
        assert wrong["error"]["data"]["reason"] == "unknown_stream", wrong
        assert wrong == none


async def resumed(http: aiohttp.ClientSession, url: str, headers: dict[str, str]) -> list[Any]:
    async with http.get(url, headers=headers) as resp:
        assert resp.status == 200, await resp.text()
        events: list[SSEEvent] = await read_events(resp)
    return messages(events)


async def test_after_a_restart_a_stream_is_served_only_at_its_servers_path(tmp_path: Path) -> None:
    async with lives(tmp_path) as (proxies, http):
        one_server = proxies.config
        two_servers(proxies)
        first = await proxies.start()
        client, received, last_id, ref = await cut_call(http, at(first, "a"), steps=500)
        await proxies.kill(first)
        second = await proxies.start()

        await assert_refused_like_unknown(http, at(second, "b"), client, last_id, ref)

        resume = client.headers(**{"Last-Event-ID": last_id})
        rest = await resumed(http, at(second, "a"), resume)
        progress = progress_of(received + rest)
        assert progress == list(range(1, len(progress) + 1))
        answers = [m for m in rest if m.get("id") == 3]
        assert [a["error"]["data"]["reason"] for a in answers] == ["proxy_restarted"]

        # A record from before servers were recorded names none: with two servers it is
        # refused at every path (which made it is unknown); with one, it is served there.
        await proxies.kill(second)
        with sqlite3.connect(tmp_path / "store.db") as db:
            assert db.execute("UPDATE streams SET server = NULL").rowcount >= 1
        db.close()
        third = await proxies.start()
        for server in ("a", "b"):
            await assert_refused_like_unknown(http, at(third, server), client, last_id, ref)
        await proxies.kill(third)
        proxies.config = one_server  # type: ignore[method-assign]
        alone = await proxies.start()
        assert await resumed(http, alone.url, resume) == rest


async def test_on_replicas_a_stream_is_served_only_at_its_servers_path(
    tmp_path: Path, redis_url: str
) -> None:
    steps = 40
    async with lives(tmp_path, shared(redis_url)) as (proxies, http):
        two_servers(proxies)
        holder, other = await proxies.start(), await proxies.start()
        client, received, last_id, ref = await cut_call(http, at(holder, "a"), steps)

        await assert_refused_like_unknown(http, at(other, "b"), client, last_id, ref)

        rest = await resumed(http, at(other, "a"), client.headers(**{"Last-Event-ID": last_id}))
        assert progress_of(received + rest) == list(range(1, steps + 1))
        answers = [m for m in rest if m.get("id") == 3]
        assert [a["result"]["content"][0]["text"] for a in answers] == [f"done {steps}"]
