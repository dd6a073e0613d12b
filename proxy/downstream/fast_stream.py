"""A fast POST's stream (:mod:`proxy.downstream.fast_call`) written straight to its
connection's transport, not through aiohttp.

A call whose answer turns out to be a stream (the server sent a notification first) was
handed to aiohttp's handler once its first event was queued: aiohttp parsed the request
again, started a handler task and wrote the headers turns of the event loop later, while
the first event waited (bench/README.md, issue 23: with SQLite, a burst's first event 3.6
ms, 2.3 before the fast POST; the handler started 2 to 14 ms after the hold's verdict,
behind a burst's turns). :class:`TransportSse` is the one thing
:meth:`~proxy.downstream.conn_response.ConnResponder.write_stream` needs instead of an
:class:`~proxy.sse_writer.SseWriter`: the same bytes as aiohttp writes for one (the head
of :func:`~proxy.downstream.whole_response.sse_head`, each write one chunk, RFC 9112 §7.1,
the head with the first), the same keepalive comments, and the same wait for a client
that reads slowly (aiohttp's writer waits for the transport after 64 KiB written).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import Protocol

from proxy.downstream.whole_response import http_date
from proxy.sse_writer import KEEPALIVE

_TERMINATOR = b"0\r\n\r\n"  # the last chunk (RFC 9112 §7.1)
_DRAIN_BYTES = 0x10000  # written before waiting for the transport, as aiohttp's writer


class Wire(Protocol):
    """What a fast POST's stream needs of its connection
    (:class:`~proxy.downstream.guard.ConnectionGuard`'s protocol)."""

    async def drained(self) -> None:
        """Return once the transport takes more (at once unless it paused writing);
        ``ConnectionResetError`` once the connection is lost."""
        ...

    def streaming(self) -> None:
        """A response goes on: aiohttp (it sees an idle connection) must not close it."""
        ...

    def idle(self) -> None:
        """The response ended: the connection's keep-alive timer runs from now."""
        ...


class TransportSse:
    """One chunked SSE response to ``transport``: its head goes with the first write."""

    __slots__ = ("_head", "_last_write", "_unwaited", "keepalive", "transport", "wire")

    def __init__(
        self,
        transport: asyncio.Transport,
        wire: Wire,
        head: tuple[bytes, bytes],
        keepalive: float,
    ) -> None:
        """``head``: :func:`~proxy.downstream.whole_response.sse_head` of the session;
        ``keepalive``: ``sse.keepalive_seconds``."""
        self.transport = transport
        self.wire = wire
        self.keepalive = keepalive
        self._head: tuple[bytes, bytes] | None = head  # until written
        self._last_write = time.monotonic()
        self._unwaited = 0  # bytes written since the last wait for the transport

    @property
    def gone(self) -> bool:
        """Whether the client hung up."""
        return self.transport.is_closing()

    def due(self) -> float:
        return self._last_write + self.keepalive - time.monotonic()

    async def open(self) -> None:
        """Send the head now (once), before any event."""
        if self._head is not None:
            self._send(b"")

    async def write(self, data: bytes) -> None:
        """Write encoded events (or a comment) as one chunk; ``ConnectionResetError`` if
        the client is gone."""
        if data or self._head is not None:
            self._send(b"%x\r\n%b\r\n" % (len(data), data) if data else b"")
            self._last_write = time.monotonic()
            self._unwaited += len(data)
            if self._unwaited > _DRAIN_BYTES:
                self._unwaited = 0
                await self.wire.drained()

    async def write_keepalive(self) -> None:
        await self.write(KEEPALIVE)

    async def end(self, data: bytes = b"") -> None:
        """Write ``data`` (the last events) and end the response, in one write (with the
        head, if not sent yet); a client already gone is no error."""
        last = b"%x\r\n%b\r\n%b" % (len(data), data, _TERMINATOR) if data else _TERMINATOR
        with contextlib.suppress(ConnectionError):
            self._send(last)

    def _send(self, body: bytes) -> None:
        transport = self.transport
        if transport.is_closing():
            raise ConnectionResetError("the client is gone")
        head = self._head
        if head is None:
            transport.write(body)
            return
        self._head = None
        before, after = head
        transport.write(b"".join((before, http_date(), after, body)))
