"""The one ``aiohttp`` client the Streamable HTTP upstream sessions of a process share.

2025-11-25 basic/transports §Session Management: an upstream MCP session is its
``Mcp-Session-Id`` header, not a connection. Each client session still has its own upstream
session (its own id, revision, token and cookies: :class:`~proxy.upstream.http_endpoint.Endpoint`),
but their requests go through one connection pool: an idle session holds no client, no
connector and no connection of its own (a client with its connector was ~8 KB a session,
``bench/README.md`` issue 23).

Ownership: each :class:`~proxy.upstream.http.HttpUpstream` takes the client with
:func:`acquire` when it starts and gives it back with :func:`release` when it stops; the
last one to give it back closes it (and its connections). One client per event loop (a
client belongs to the loop it was made in). Cookies are not shared: the client keeps none
(``DummyCookieJar``); an endpoint keeps its session's own.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

import aiohttp


@dataclass
class _Held:
    client: aiohttp.ClientSession
    users: int


_clients: dict[asyncio.AbstractEventLoop, _Held] = {}


async def _body_written(_: object, ctx: object, __: object) -> None:
    """A request's body is out: set the ``asyncio.Event`` it was sent with, if any
    (``trace_request_ctx``; the HTTP upstream's writer waits for it)."""
    if isinstance(event := getattr(ctx, "trace_request_ctx", None), asyncio.Event):
        event.set()


def acquire() -> aiohttp.ClientSession:
    """The loop's shared client (made now if no session holds it); :func:`release` it once."""
    loop = asyncio.get_running_loop()
    held = _clients.get(loop)
    if held is None or held.client.closed:
        trace = aiohttp.TraceConfig()
        trace.on_request_chunk_sent.append(_body_written)
        client = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=0),
            timeout=aiohttp.ClientTimeout(total=None),
            cookie_jar=aiohttp.DummyCookieJar(),
            trace_configs=[trace],
        )
        held = _clients[loop] = _Held(client, 0)
    held.users += 1
    return held.client


async def release(client: aiohttp.ClientSession) -> None:
    """Give back what :func:`acquire` gave; the last user closes the client."""
    loop = asyncio.get_running_loop()
    held = _clients.get(loop)
    if held is None or held.client is not client:  # already closed and replaced
        await client.close()
        return
    held.users -= 1
    if held.users <= 0:
        del _clients[loop]
        await client.close()


def users() -> int:
    """How many upstream sessions hold this loop's client (0: none is open)."""
    held = _clients.get(asyncio.get_running_loop())
    return 0 if held is None else held.users
