"""proxy/downstream/fast_stream.py: a fast POST's stream is byte for byte what aiohttp
writes for the same :class:`SseWriter` calls (but ``Date``), waits for a slow client as
aiohttp's writer does, and raises once the client is gone."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web

from proxy.downstream.fast_stream import TransportSse
from proxy.downstream.whole_response import sse_head
from proxy.sse_writer import SseWriter

SESSION = "s" * 32
EVENT = b'id: e.1.1\ndata: {"jsonrpc":"2.0","method":"notifications/progress"}\n\n'
LAST = b'id: e.1.2\ndata: {"jsonrpc":"2.0","id":1,"result":{}}\n\n'


class Transport:
    def __init__(self) -> None:
        self.data = bytearray()
        self.closing = False

    def write(self, data: bytes) -> None:
        self.data += data

    def is_closing(self) -> bool:
        return self.closing


class Wire:
    def __init__(self) -> None:
        self.drains = 0
        self.writable = asyncio.Event()
        self.writable.set()

    async def drained(self) -> None:
        self.drains += 1
        await self.writable.wait()

    def streaming(self) -> None:
        return None

    def idle(self) -> None:
        return None


Writer = Any  # an SseWriter or a TransportSse: the calls below are the same
SEQUENCES: dict[str, Callable[[Writer], Awaitable[object]]] = {}


def sequence(f: Callable[[Writer], Awaitable[object]]) -> Callable[[Writer], Awaitable[object]]:
    SEQUENCES[f.__name__] = f
    return f


@sequence
async def events_keepalive_end(w: Writer) -> None:
    await w.write(EVENT)
    await w.write_keepalive()
    await w.end(LAST)


@sequence
async def opened_then_ended_empty(w: Writer) -> None:
    await w.open()
    await w.write(b"")
    await w.end()


@sequence
async def ended_at_once(w: Writer) -> None:
    await w.end(LAST)


def _without_date(raw: bytes) -> bytes:
    return re.sub(rb"\r\nDate: [^\r]*\r\n", b"\r\nDate: -\r\n", raw)


async def test_the_stream_is_what_aiohttp_writes(aiohttp_server: Any) -> None:
    async def handler(request: web.Request) -> web.StreamResponse:
        writer = SseWriter(request, 15.0, {"Connection": "keep-alive", "Mcp-Session-Id": SESSION})
        await SEQUENCES[request.match_info["name"]](writer)
        return writer.response

    app = web.Application()
    app.router.add_post("/{name}", handler)
    server = await aiohttp_server(app)
    for name, calls in SEQUENCES.items():
        reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
        try:
            writer.write(f"POST /{name} HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n".encode())
            theirs = b""
            while not theirs.endswith(b"0\r\n\r\n"):
                got = await asyncio.wait_for(reader.read(65536), 10)
                assert got, theirs
                theirs += got
        finally:
            writer.close()
        transport = Transport()
        ours = TransportSse(transport, Wire(), sse_head(SESSION), 15.0)  # type: ignore[arg-type]
        await calls(ours)
        assert _without_date(bytes(transport.data)) == _without_date(theirs), name


async def test_a_slow_client_is_waited_for_after_64_kib() -> None:
    wire = Wire()
    transport = Transport()
    ours = TransportSse(transport, wire, sse_head(SESSION), 15.0)  # type: ignore[arg-type]
    await ours.write(b"x" * 60_000)
    assert wire.drains == 0
    wire.writable.clear()  # the transport paused writing
    blocked = asyncio.ensure_future(ours.write(b"x" * 10_000))
    await asyncio.sleep(0)
    assert wire.drains == 1 and not blocked.done()
    wire.writable.set()
    await asyncio.wait_for(blocked, 10)
    assert transport.data.endswith(b"x" * 10_000 + b"\r\n")


async def test_a_gone_client_raises_on_write_and_ends_quietly() -> None:
    transport = Transport()
    ours = TransportSse(transport, Wire(), sse_head(SESSION), 15.0)  # type: ignore[arg-type]
    await ours.write(EVENT)
    transport.closing = True
    assert ours.gone
    try:
        await ours.write(EVENT)
    except ConnectionResetError:
        pass
    else:
        raise AssertionError("a write to a closing transport went through")
    await ours.end(LAST)  # (no error: the client is gone)
