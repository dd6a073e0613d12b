"""The HTTP ``GET`` listen stream (a session's standalone stream) across replicas (issue
19): two replicas on one real Redis; the session is A's, its server the task fixture,
which says a numbered log message outside any call each time the client sends
``notifications/roots/list_changed``.

A client listening on B (the GET forwarded to A, the stream served from the shared log)
is cut; what the server says meanwhile waits for it. Reconnecting with ``GET`` +
``Last-Event-ID`` through either replica, it gets what it missed, once and in order, and
then the server's later messages live, wherever it listens. A new listen ``GET`` (no
``Last-Event-ID``) after B's ended starts after what B wrote, never again with it (each
message on one stream); one opened while B's is open takes the stream from it (B's
response ends), as a ``/ws`` socket does, except that a ``GET`` on the holder keeps it
against later ones (``409 conflict``), as on one proxy.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import aiohttp

from proxy.core.sse import SSEDecoder
from tests.downstream.sse_client import RawSession
from tests.modern.support import SERVER
from tests.proxy_lives import Proxy, lives, restartable_redis, shared
from tests.support import eventually, log_events

ROOTS_CHANGED = {"jsonrpc": "2.0", "method": "notifications/roots/list_changed"}


class Listener:
    """One GET listen stream, read message by message (with each message's event id)."""

    def __init__(self, resp: aiohttp.ClientResponse) -> None:
        self.resp = resp
        self._decoder = SSEDecoder()
        self._ready: list[tuple[str, dict[str, Any]]] = []

    async def rest(self) -> list[dict[str, Any]]:
        """The messages until the stream ends."""
        got = [msg for _, msg in self._ready]
        self._ready.clear()
        async for chunk in self.resp.content.iter_any():
            got += [json.loads(e.data) for e in self._decoder.feed(chunk) if e.data]
        return got

    async def next_said(self) -> tuple[str, int]:
        """The next log message the server said: its event id and number."""
        while True:
            while self._ready:
                event_id, msg = self._ready.pop(0)
                if msg.get("method") == "notifications/message":
                    return event_id, int(str(msg["params"]["data"]).removeprefix("roots changed "))
            chunk = await self.resp.content.readany()
            assert chunk, "the listen stream ended"
            for event in self._decoder.feed(chunk):
                if event.data:
                    self._ready.append((event.id or "", json.loads(event.data)))


async def listen(client: RawSession, url: str, last_event_id: str | None = None) -> Listener:
    headers = client.headers(Accept="text/event-stream")
    if last_event_id is not None:
        headers["Last-Event-ID"] = last_event_id
    resp = await client.http.get(url, headers=headers)
    assert resp.status == 200, (resp.status, await resp.text())
    return Listener(resp)


async def test_a_get_listen_stream_cut_on_one_replica_resumes_on_either(
    tmp_path: Path, redis_url: str
) -> None:
    async with lives(tmp_path, shared(redis_url)) as (proxies, http):
        proxies.command = SERVER
        a, b = await asyncio.gather(proxies.start(), proxies.start())
        client = RawSession(http, a.url)
        await client.initialize()
        said = 0

        async def say() -> int:
            nonlocal said
            said += 1
            await client.notify("notifications/roots/list_changed")
            return said

        async with asyncio.timeout(60):
            on_b = await listen(client, b.url)
            n = await say()
            last_id, got = await on_b.next_said()
            assert got == n
            on_b.resp.close()  # cut
            missed = [await say(), await say()]
            # Back through A (the holder), from the last id it got.
            on_a = await listen(client, a.url, last_id)
            for expected in missed:
                last_id, got = await on_a.next_said()
                assert got == expected
            n = await say()
            last_id, got = await on_a.next_said()
            assert got == n
            on_a.resp.close()
            missed = [await say()]
            # And through B again.
            again = await listen(client, b.url, last_id)
            for expected in missed:
                last_id, got = await again.next_said()
                assert got == expected
            n = await say()
            last_id, got = await again.next_said()
            assert got == n
            again.resp.close()


async def listen_when_free(client: RawSession, url: str) -> Listener:
    """A listen GET, sent again while refused with 409 (another GET keeps the stream
    until its proxy sees it gone: what a client does with that documented error)."""
    while True:
        headers = client.headers(Accept="text/event-stream")
        resp = await client.http.get(url, headers=headers)
        if resp.status != 409:
            assert resp.status == 200, (resp.status, await resp.text())
            return Listener(resp)
        assert (await resp.json())["error"]["data"] == {"reason": "conflict"}
        await asyncio.sleep(0.1)


class Says:
    """The client's session on A, and the server's numbered messages it makes."""

    def __init__(self, client: RawSession) -> None:
        self.client = client
        self.count = 0

    async def say(self) -> int:
        self.count += 1
        await self.client.notify("notifications/roots/list_changed")
        return self.count


@asynccontextmanager
async def session_on_a(
    tmp_path: Path, store: dict[str, Any]
) -> AsyncIterator[tuple[Proxy, Proxy, RawSession, Says]]:
    """Replicas A and B on ``store`` in front of the task fixture, a client's session on
    A, and the messages its server says."""
    async with lives(tmp_path, store) as (proxies, http):
        proxies.command = SERVER
        a, b = await asyncio.gather(proxies.start(), proxies.start())
        client = RawSession(http, a.url)
        await client.initialize()
        yield a, b, client, Says(client)


async def ended(proxy: Proxy, listener: Listener) -> None:
    """Cut ``listener`` and wait until ``proxy`` is done with it (its remote listen GET
    told the holder how far it wrote)."""
    before = len(log_events(proxy.log_path.read_text(), "remote_listen_ended"))
    listener.resp.close()
    await eventually(
        lambda: len(log_events(proxy.log_path.read_text(), "remote_listen_ended")) > before,
        what="the replica to end the listen GET",
    )


async def test_a_new_listen_get_starts_after_what_a_listener_on_another_replica_wrote(
    tmp_path: Path, redis_url: str
) -> None:
    async with session_on_a(tmp_path, shared(redis_url)) as (a, b, client, says):
        async with asyncio.timeout(60):
            on_b = await listen(client, b.url)
            n = await says.say()
            assert (await on_b.next_said())[1] == n
            await ended(b, on_b)
            n = await says.say()  # said while nobody listens
            on_a = await listen(client, a.url)  # on the holder
            assert (await on_a.next_said())[1] == n  # not 1 again
            on_a.resp.close()
            on_b = await listen_when_free(client, b.url)  # once A saw its GET go
            n = await says.say()
            assert (await on_b.next_said())[1] == n
            await ended(b, on_b)
            on_b = await listen(client, b.url)  # again on B: after what B wrote
            n = await says.say()
            assert (await on_b.next_said())[1] == n
            on_b.resp.close()


async def test_a_newer_listen_get_takes_the_stream_from_one_on_another_replica(
    tmp_path: Path, redis_url: str
) -> None:
    async with session_on_a(tmp_path, shared(redis_url)) as (a, b, client, says):
        async with asyncio.timeout(60):
            first = await listen(client, b.url)
            n = await says.say()
            assert (await first.next_said())[1] == n
            second = await listen(client, b.url)  # another on B takes it from the first
            assert (await first.rest()) == []  # the first ends, with nothing more
            n = await says.say()
            assert (await second.next_said())[1] == n
            on_a = await listen(client, a.url)  # one on the holder takes it from B's
            assert (await second.rest()) == []
            n = await says.say()
            assert (await on_a.next_said())[1] == n
            # The holder's own GET keeps it: a later one anywhere is refused, 409.
            for url in (a.url, b.url):
                headers = client.headers(Accept="text/event-stream")
                async with client.http.get(url, headers=headers) as refused:
                    assert refused.status == 409, await refused.text()
                    body = await refused.json()
                    assert body["error"]["data"] == {"reason": "conflict"}
            on_a.resp.close()


async def test_a_listen_get_ending_while_the_store_restarts_still_says_how_far_it_wrote(
    tmp_path: Path,
) -> None:
    """B's listen GET ends while Redis restarts: its release (how far it wrote) is sent
    once the store is back, so the next listen GET, on A, starts after it, not after the
    last position B acknowledged (which would say 2 and 3 again)."""
    with restartable_redis(tmp_path) as (server, store):
        async with session_on_a(tmp_path, store) as (a, b, client, says):
            async with asyncio.timeout(60):
                on_b = await listen(client, b.url)
                for _ in range(3):  # (within a second: only the first is acknowledged)
                    n = await says.say()
                    assert (await on_b.next_said())[1] == n
                server.stop()
                await ended(b, on_b)
                await asyncio.sleep(0.5)  # (B's release meets no store)
                server.start()
                on_a = await listen_when_free(client, a.url)
                n = await says.say()
                assert (await on_a.next_said())[1] == n  # not 2 again
                on_a.resp.close()
