"""``/ws`` and a session's standalone stream across replicas (issue 19): two replicas on
one real Redis; the session is A's, its server the task fixture, which says a numbered
log message outside any call each time the client sends
``notifications/roots/list_changed``.

A session's newest socket takes the standalone stream, wherever it and the socket it
takes it from are: a new socket on B while the old one on A stays open, one on B after
another on B, one on A after one on B; a socket reconnecting to B (or to A) after the
last one closed gets what was said while none was open. Each message reaches exactly one
socket, the newest when it was said: every socket, read up to the answer of a ``ping``
sent after the last message, holds exactly the messages said while it was the newest.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from tests.downstream.ws_client import Client, initialize, socket_beside
from tests.modern.support import SERVER
from tests.proxy_lives import Proxy, lives, restartable_redis, shared
from tests.support import eventually, log_events

ROOTS_CHANGED = {"jsonrpc": "2.0", "method": "notifications/roots/list_changed"}


def said(msg: dict[str, object]) -> int | None:
    """The number of the fixture's log message ``msg``, else None."""
    if msg.get("method") != "notifications/message":
        return None
    params = msg.get("params")
    assert isinstance(params, dict), msg
    return int(str(params["data"]).removeprefix("roots changed "))


def closed(proxy: Proxy) -> int:
    """How many sockets ``proxy`` is done with (``ws_closed``: the socket's last line)."""
    return len(log_events(proxy.log_path.read_text(errors="replace"), "ws_closed"))


async def until_closed(proxy: Proxy, before: int) -> None:
    """Wait until ``proxy`` is done with one more socket than ``before`` (a client's
    close reaches the proxy a moment after the client is done with it)."""
    await eventually(lambda: closed(proxy) > before, what="the proxy to close the socket")


@contextlib.asynccontextmanager
async def two_replicas(
    tmp_path: Path, store: dict[str, Any]
) -> AsyncIterator[tuple[Proxy, Proxy, contextlib.AsyncExitStack]]:
    """Replicas A and B on ``store`` in front of the task fixture, and a stack the test's
    sockets are closed by (before the replicas stop)."""
    async with (
        lives(tmp_path, store) as (proxies, _),
        contextlib.AsyncExitStack() as sockets,
    ):
        proxies.command = SERVER
        a, b = await asyncio.gather(proxies.start(), proxies.start())
        yield a, b, sockets


class Says:
    """Makes the server say its messages, and reads them where they come."""

    def __init__(self) -> None:
        self.count = 0
        self.got: dict[str, list[int]] = {}  # socket name → the messages it got
        self._pings = itertools.count(100)

    async def say(self, via: Client) -> int:
        """The server says message n (the client's notification through ``via``)."""
        self.count += 1
        await via.send(ROOTS_CHANGED)
        return self.count

    async def read(self, name: str, c: Client, n: int) -> None:
        """Read ``c`` until message ``n`` (every message before it counted too)."""
        got = self.got.setdefault(name, [])
        while n not in got:
            number = said(await c.recv())
            if number is not None:
                got.append(number)

    async def settle(self, name: str, c: Client) -> None:
        """Read ``c`` up to the answer of a ping: the messages that came before it count."""
        answer, before = await c.call(next(self._pings), "ping")
        assert "result" in answer, answer
        got = self.got.setdefault(name, [])
        got.extend(n for n in map(said, before) if n is not None)


async def test_the_newest_socket_takes_the_standalone_stream_on_any_replica(
    tmp_path: Path, redis_url: str
) -> None:
    async with two_replicas(tmp_path, shared(redis_url)) as (a, b, sockets):
        says = Says()

        async def open_socket(url: str, session: str | None = None) -> Client:
            return await sockets.enter_async_context(socket_beside(url, session))

        s1 = await open_socket(a.url)
        session = await initialize(s1)
        await says.read("s1 on A", s1, await says.say(s1))
        # A new socket on B takes it from the open one on A (the session is A's).
        s2 = await open_socket(b.url, session)
        await says.read("s2 on B", s2, await says.say(s2))
        # Another on B takes it from the one on B, one on A from that.
        s3 = await open_socket(b.url, session)
        await says.read("s3 on B", s3, await says.say(s3))
        before = closed(a)
        async with socket_beside(a.url, session) as s4:
            await says.read("s4 on A", s4, await says.say(s4))
            await says.settle("s4 on A", s4)
        await until_closed(a, before)
        # Said with no socket holding it (s4 closed): the next socket, on B, gets it.
        waiting = await says.say(s1)
        before = closed(b)
        async with socket_beside(b.url, session) as s5:
            await says.read("s5 on B", s5, waiting)
            await says.read("s5 on B", s5, await says.say(s5))
            await says.settle("s5 on B", s5)
        await until_closed(b, before)
        # And once B's socket closed, the next one, on A, gets what it had not.
        waiting = await says.say(s1)
        s6 = await open_socket(a.url, session)
        await says.read("s6 on A", s6, waiting)
        await says.read("s6 on A", s6, await says.say(s6))
        for name, c in (("s1 on A", s1), ("s2 on B", s2), ("s3 on B", s3), ("s6 on A", s6)):
            await says.settle(name, c)
        assert says.got == {
            "s1 on A": [1],
            "s2 on B": [2],
            "s3 on B": [3],
            "s4 on A": [4],
            "s5 on B": [5, 6],
            "s6 on A": [7, 8],
        }


async def test_a_socket_closing_while_the_store_restarts_still_says_how_far_it_wrote(
    tmp_path: Path,
) -> None:
    """A socket on B closes while Redis restarts: its release (how far it wrote the
    standalone stream) is sent once the store is back, so the next socket, on A, starts
    after it, not after the last position B acknowledged (which would say 2 and 3 again)."""
    with restartable_redis(tmp_path) as (server, store):
        async with two_replicas(tmp_path, store) as (a, b, sockets):
            says = Says()
            s1 = await sockets.enter_async_context(socket_beside(a.url))
            session = await initialize(s1)
            before = closed(b)
            async with socket_beside(b.url, session) as s2:
                for _ in range(3):  # (within ACK_SECONDS: only the first is acknowledged)
                    await says.read("s2 on B", s2, await says.say(s2))
                server.stop()
            await asyncio.sleep(0.5)  # (B's release meets no store)
            server.start()
            await until_closed(b, before)
            s3 = await sockets.enter_async_context(socket_beside(a.url, session))
            await says.read("s3 on A", s3, await says.say(s3))
            await says.settle("s3 on A", s3)
    assert says.got == {"s2 on B": [1, 2, 3], "s3 on A": [4]}


async def test_a_takeover_while_the_store_restarts_starts_after_what_the_old_socket_wrote(
    tmp_path: Path,
) -> None:
    """A new socket on A takes the standalone stream from an open one on B while Redis
    restarts: the takeover is sent once the store is back, B says how far it wrote, and
    the new socket starts after that, not after B's last acknowledged position."""
    with restartable_redis(tmp_path) as (server, store):
        async with two_replicas(tmp_path, store) as (a, b, sockets):
            says = Says()
            s1 = await sockets.enter_async_context(socket_beside(a.url))
            session = await initialize(s1)
            s2 = await sockets.enter_async_context(socket_beside(b.url, session))
            for _ in range(3):  # (within ACK_SECONDS: only the first is acknowledged)
                await says.read("s2 on B", s2, await says.say(s2))
            server.stop()
            restarted = asyncio.get_running_loop().call_later(0.5, server.start)
            s3 = await sockets.enter_async_context(socket_beside(a.url, session))
            await says.read("s3 on A", s3, await says.say(s3))
            restarted.cancel()
            for name, c in (("s2 on B", s2), ("s3 on A", s3)):
                await says.settle(name, c)
    assert says.got == {"s2 on B": [1, 2, 3], "s3 on A": [4]}
