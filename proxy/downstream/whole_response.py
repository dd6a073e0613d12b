"""A whole SSE response written to the socket in one write: the common legacy call.

A POST whose answer came while its headers were held (``sse.json_answer_window_ms``) has
its whole response at hand: status line, headers, the priming event, the answer and the
end. aiohttp would build a header map, run the response signals, serialise the headers
and frame the body for it, on every call; here the header block is the one aiohttp writes
for an :class:`~proxy.sse_writer.SseWriter` response (same names, order and chunked
framing), precomputed per session but for its ``Date``.

Only where aiohttp would write those same bytes: HTTP/1.1, a connection kept alive, and no
``Origin`` (the app's ``on_response_prepare`` adds CORS headers to a browser's response);
otherwise :meth:`SseWriter.end` writes it, as before.
"""

from __future__ import annotations

import asyncio
import functools
import time
from email.utils import formatdate

from aiohttp import web
from aiohttp.http import SERVER_SOFTWARE, HttpVersion11

from proxy.core.protocol import SESSION_HEADER
from proxy.sse_writer import SSE_HEADERS

_TERMINATOR = b"0\r\n\r\n"  # the last chunk (RFC 9112 §7.1)


class Prewritten(web.StreamResponse):
    """What the handler returns for a response it wrote itself: aiohttp's own
    ``prepare`` and ``write_eof`` after the handler find nothing left to do, and the
    connection stays open for the client's next request."""

    async def prepare(self, request: web.BaseRequest) -> None:
        return None

    async def write_eof(self, data: bytes = b"") -> None:
        return None

    @property
    def keep_alive(self) -> bool:
        return True


def can_write_whole(request: web.Request) -> bool:
    """Whether aiohttp would write the response :func:`sse_head` describes to ``request``."""
    return (
        request.version == HttpVersion11
        and request.keep_alive
        and "Origin" not in request.headers
        and request.method == "POST"
    )


@functools.lru_cache(maxsize=1024)  # per call, the same few sessions (bounded)
def sse_head(session_id: str) -> tuple[bytes, bytes]:
    """The status line and headers of a chunked SSE response of session ``session_id``,
    in two parts: what goes before the ``Date`` value, and what after."""
    lines = ["HTTP/1.1 200 OK"]
    headers = {**SSE_HEADERS, "Connection": "keep-alive", SESSION_HEADER: session_id}
    lines += [f"{name}: {value}" for name, value in headers.items()]
    lines += ["Transfer-Encoding: chunked", "Date: "]
    return "\r\n".join(lines).encode(), f"\r\nServer: {SERVER_SOFTWARE}\r\n\r\n".encode()


_date_second = -1
_date = b""


def http_date() -> bytes:
    """``Date`` (RFC 9110 §6.6.1), formatted once a second."""
    global _date_second, _date
    now = int(time.time())
    if now != _date_second:
        _date_second, _date = now, formatdate(now, usegmt=True).encode()
    return _date


def write_whole(request: web.Request, head: tuple[bytes, bytes], body: bytes) -> Prewritten:
    """Write ``head`` and ``body`` (the events, the end) as one response, one write.
    Raises ``ConnectionResetError`` if the client is gone."""
    transport = request.transport
    if transport is None:
        raise ConnectionResetError("the client is gone")
    write_whole_to(transport, head, body)
    return Prewritten(status=200)


def write_whole_to(transport: asyncio.Transport, head: tuple[bytes, bytes], body: bytes) -> None:
    """:func:`write_whole` on the connection's own transport (the fast POST,
    :mod:`proxy.downstream.fast_post`). Raises ``ConnectionResetError`` if the client is gone."""
    if transport.is_closing():
        raise ConnectionResetError("the client is gone")
    before, after = head
    chunk = b"%x\r\n%b\r\n%b" % (len(body), body, _TERMINATOR) if body else _TERMINATOR
    transport.write(b"".join((before, http_date(), after, chunk)))
