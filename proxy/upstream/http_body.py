"""Reading a Streamable HTTP server's answers (JSON bodies, SSE streams), and the names
the HTTP upstream's modules share.

Helpers of :mod:`proxy.upstream.http`; they never log URLs or headers (secrets).
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import aiohttp
import structlog

from proxy.core import jsonrpc
from proxy.core.errors import ProxyError
from proxy.core.jsonrpc import Kind, Message
from proxy.core.sse import SSEDecodeError, SSEDecoder, SSEEvent

log = structlog.get_logger("proxy.upstream.http")

Sink = Callable[[Message], None]

POST_ACCEPT = "application/json, text/event-stream"
SSE = "text/event-stream"
EXPIRED = "upstream session expired"
NETWORK_ERRORS = (aiohttp.ClientError, OSError, TimeoutError, SSEDecodeError)


class BadBody(Exception):
    """A response the spec does not allow: the request it answers gets an error."""


@dataclass
class Cursor:
    """Where one SSE stream stands: what a resume must name, and what the last read did."""

    last_id: str | None = None
    retry_ms: int | None = None
    progressed: bool = False


def is_safe_header(value: str) -> bool:
    """Printable ASCII only: it goes back in a header (Last-Event-ID, Mcp-Session-Id)."""
    return bool(value) and all(0x20 <= ord(c) < 0x7F for c in value)


def setter(event: asyncio.Event) -> Callable[[asyncio.Task[Any]], None]:
    return lambda _: event.set()


def answers(messages: list[Message], rid: Any) -> bool:
    return any(m.kind is Kind.RESPONSE and m.id == rid for m in messages)


def tls_failure(exc: BaseException) -> str | None:
    """A failed TLS handshake in words, the same from every path (aiohttp's POST wraps the
    :class:`ssl.SSLError`, the standalone GET meets it bare): OpenSSL's reason and, for a
    certificate, why it is not trusted; never the server's bytes, the URL or the host.
    None when ``exc`` is no TLS failure."""
    if isinstance(exc, aiohttp.ClientConnectorError):
        exc = exc.os_error  # (a ClientConnectorCertificateError's is the ssl error)
    if not isinstance(exc, ssl.SSLError) or isinstance(exc, aiohttp.ClientError):
        return None
    if isinstance(exc, ssl.SSLCertVerificationError):  # why it is not trusted, in words
        return f"TLS failed ({exc.reason}: {exc.verify_message})"
    return f"TLS failed ({exc.reason or type(exc).__name__})"


def why_failed(exc: BaseException) -> str:
    """A failure in words, without the URL (its query or userinfo may hold secrets)."""
    if (tls := tls_failure(exc)) is not None:
        return tls
    if isinstance(exc, aiohttp.ClientConnectorError):
        return f"cannot connect ({exc.os_error.strerror or type(exc.os_error).__name__})"
    if isinstance(exc, TimeoutError):
        return "timed out"
    if isinstance(exc, aiohttp.ServerDisconnectedError):
        return "server disconnected"
    if isinstance(exc, aiohttp.ClientPayloadError):
        return "response cut off"
    if isinstance(exc, aiohttp.ClientResponseError):
        return f"HTTP {exc.status}"
    if isinstance(exc, BadBody):
        return str(exc)
    if isinstance(exc, ProxyError):
        return exc.message
    return type(exc).__name__


async def read_json(next_chunk: Callable[[], Awaitable[bytes]], limit: int) -> list[Message]:
    """A JSON response body: one message or a batch (at most ``limit`` bytes)."""
    body = bytearray()
    while chunk := await next_chunk():
        body += chunk
        if len(body) > limit:
            raise BadBody(f"body over {limit} bytes")
    obj = jsonrpc.decode(bytes(body))
    return [jsonrpc.classify(item) for item in (obj if isinstance(obj, list) else [obj])]


async def read_sse(
    next_chunk: Callable[[], Awaitable[bytes]],
    limit: int,
    session: str,
    cursor: Cursor,
    sink: Sink,
    done: Callable[[], bool],
) -> None:
    """Hand each message of an SSE body to ``sink`` until it ends or ``done()``."""
    decoder = SSEDecoder(limit)
    cursor.progressed = False
    while chunk := await next_chunk():
        if take_events(decoder.feed(chunk), session, cursor, sink, done):
            return
        if decoder.error is not None:  # after the events before the bad line
            raise decoder.error


def take_events(
    events: list[SSEEvent], session: str, cursor: Cursor, sink: Sink, done: Callable[[], bool]
) -> bool:
    """Hand each message of ``events`` to ``sink``; True once ``done()`` (the rest is left).

    Events without data (the 2025-11-25 priming event) only move the cursor; an event
    that is not JSON-RPC is logged and skipped.
    """
    for event in events:
        if event.id is not None and event.id != cursor.last_id and is_safe_header(event.id):
            cursor.last_id, cursor.progressed = event.id, True
        if event.retry is not None:
            cursor.retry_ms = event.retry
        if not event.data or event.event != "message":
            continue
        cursor.progressed = True
        try:
            obj = jsonrpc.decode(event.data)
            items = obj if isinstance(obj, list) else [obj]
            messages = [jsonrpc.classify(item) for item in items]
        except ProxyError as exc:
            log.warning("upstream_event_skipped", session=session, error=exc.message)
            continue
        for msg in messages:
            sink(msg)
        if done():
            return True
    return False


def never() -> bool:
    """``done`` for a stream read to its end (the standalone stream)."""
    return False
