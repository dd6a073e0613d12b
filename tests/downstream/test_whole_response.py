"""proxy/downstream/whole_response.py: the one-write SSE response is byte for byte what
aiohttp writes for the same :class:`SseWriter` response (but its ``Date``), and it leaves
the connection open for the next request; where aiohttp would write something else
(``Connection: close``, HTTP/1.0, a browser's ``Origin``) it is not used."""

from __future__ import annotations

import asyncio
import re
from typing import Any

from aiohttp import web

from proxy.downstream.whole_response import can_write_whole, sse_head, write_whole
from proxy.sse_writer import SseWriter

SESSION = "s" * 32
BODY = b'id: e.1.1\ndata: {"jsonrpc":"2.0","id":1,"result":{}}\n\n'


async def _whole(request: web.Request) -> web.StreamResponse:
    return write_whole(request, sse_head(SESSION), BODY)


async def _aiohttp(request: web.Request) -> web.StreamResponse:
    writer = SseWriter(request, 15.0, {"Connection": "keep-alive", "Mcp-Session-Id": SESSION})
    return await writer.end(BODY)


async def _eligible(request: web.Request) -> web.StreamResponse:
    return web.Response(text=str(can_write_whole(request)))


def _without_date(raw: bytes) -> bytes:
    return re.sub(rb"\r\nDate: [^\r]*\r\n", b"\r\nDate: -\r\n", raw)


async def _exchange(port: int, requests: list[bytes], until: bytes) -> bytes:
    """Send ``requests`` on one connection; what came back once ``until`` ends it."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(b"".join(requests))
        data = b""
        while not data.endswith(until) or data.count(until) < len(requests):
            chunk = await asyncio.wait_for(reader.read(65536), 10)
            assert chunk, f"closed early: {data!r}"
            data += chunk
        return data
    finally:
        writer.close()


def _post(path: str, extra: str = "", version: str = "1.1") -> bytes:
    return (
        f"POST {path} HTTP/{version}\r\nHost: 127.0.0.1\r\nContent-Length: 0\r\n{extra}\r\n"
    ).encode()


async def test_the_whole_response_is_what_aiohttp_writes_and_keeps_the_connection(
    aiohttp_server: Any,
) -> None:
    app = web.Application()
    app.router.add_post("/whole", _whole)
    app.router.add_post("/aiohttp", _aiohttp)
    server = await aiohttp_server(app)
    ours = await _exchange(server.port, [_post("/whole")] * 2, b"0\r\n\r\n")
    theirs = await _exchange(server.port, [_post("/aiohttp")] * 2, b"0\r\n\r\n")
    assert _without_date(ours) == _without_date(theirs)  # both answers, on one connection
    assert ours.count(b"HTTP/1.1 200 OK\r\n") == 2 and b"Date: " in ours


async def test_only_where_aiohttp_would_write_the_same(aiohttp_server: Any) -> None:
    app = web.Application()
    app.router.add_post("/", _eligible)
    app.router.add_get("/", _eligible)
    server = await aiohttp_server(app)
    cases = [
        (_post("/"), b"True"),
        (_post("/", "Connection: close\r\n"), b"False"),
        (_post("/", "Origin: http://localhost\r\n"), b"False"),
        (_post("/", version="1.0"), b"False"),
        (b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n", b"False"),
    ]
    for request, expected in cases:
        answer = await _exchange(server.port, [request], expected)
        assert answer.endswith(expected), (request, answer)
