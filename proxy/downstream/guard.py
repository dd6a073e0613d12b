"""Reading client requests is bounded: in time, in memory, and in connections.

- Headers: a request's headers must be complete ``listen.header_timeout_seconds`` after
  its first byte (the first request of a connection: after the connection opened), else
  ``408`` and the connection closes (without a response if not a byte came: no request is
  waiting for one, and a client about to send one must not take it for its answer). An
  idle keep-alive connection is not timed here (aiohttp's ``keepalive_timeout`` is), nor
  is a response (an SSE stream) being written.
- Body: :func:`read_body` reads a POST body within ``listen.body_timeout_seconds`` (else
  ``408``, :class:`RequestTimeout`) and counts it against :class:`BodyBudget`, the body
  bytes being received by all connections together (``listen.max_inflight_body_bytes``;
  past it ``503 too_many_body_bytes``, before a body with a Content-Length is read).
- Connections: past ``listen.max_connections`` a new connection gets ``503
  too_many_connections`` and is closed; open ones go on.

aiohttp (3.14 when this was written) has no timeout for reading headers: its
``RequestHandler`` starts no timer between a request's first byte and its last header.
:class:`ConnectionGuard` is therefore the protocol factory given to
``loop.create_server``: each connection's protocol is a :class:`_GuardedConnection` that
passes every byte to aiohttp's own protocol (made by ``runner.server``, aiohttp's
documented factory) and owns the header timer and the connection count.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from http import HTTPStatus
from typing import TYPE_CHECKING, Protocol, cast

import structlog
from aiohttp import web
from aiohttp.web_protocol import RequestHandler

from proxy.config_sections import ListenConfig
from proxy.core.errors import Overloaded, PayloadTooLarge, ProxyError, RequestTimeout
from proxy.downstream.server_log import QUEUE_SLOT, quiet_refusal

if TYPE_CHECKING:
    from proxy.downstream.fast_call import FastCall
    from proxy.downstream.handoff import Handoff

log = structlog.get_logger("proxy.http")


class FastPosts(Protocol):
    """What the guard needs of :class:`~proxy.downstream.fast_post.FastPosts` (named
    here, not imported: that module leads to the handler's, which imports this one)."""

    @property
    def handoffs(self) -> dict[object, Handoff]: ...

    def prepare(self, data: bytes, transport: asyncio.Transport) -> FastCall | None: ...

    def forget(self, transport: object) -> None: ...


# What a connection may send while a fast POST is answered (the next requests, held until
# it is) before its reading pauses: a stream may go on for long.
_FAST_NEXT_BYTES = 1 << 20

# How long a refused or timed-out connection may still send (it is read and dropped)
# before it is closed: closing with unread input would reset the connection and could
# lose the error response the client is about to read.
_LINGER_SECONDS = 1.0


def raw_error_response(error: ProxyError) -> bytes:
    """:func:`proxy.downstream.wire.error_response` as bytes, for when there is no request
    to answer (aiohttp has not parsed one): the same status and JSON-RPC body, then close."""
    body = json.dumps(error.to_jsonrpc()).encode()
    head = (
        f"HTTP/1.1 {error.http_status} {HTTPStatus(error.http_status).phrase}\r\n"
        "Content-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n"
        "Connection: close\r\n\r\n"
    )
    return head.encode("ascii") + body


# ---------------------------------------------------------------------- bodies
class BodyBudget:
    """Request-body bytes being received, all connections together.

    One body is always admitted when nothing else is in flight, so a limit below
    ``sessions.max_message_bytes`` slows large messages down but never refuses them all.
    """

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.used = 0

    def take(self, size: int) -> None:
        """Count ``size`` more bytes in flight; ``Overloaded`` if that passes the limit."""
        if self.used and self.used + size > self.limit:
            raise Overloaded(
                f"Too many request bytes in flight (listen.max_inflight_body_bytes="
                f"{self.limit}); try again later",
                reason="too_many_body_bytes",
            )
        self.used += size

    def give_back(self, size: int) -> None:
        self.used -= size


async def read_body(
    request: web.Request, budget: BodyBudget, *, max_bytes: int, timeout: float
) -> bytes:
    """The whole body of ``request``, read within ``timeout`` seconds.

    A Content-Length is counted against ``budget`` before the first byte is read; a
    chunked body as it arrives. Either way the bytes are given back once it is read (or
    not): what the body becomes is bounded by the session's own limits.
    """
    expected = request.content_length
    if request.content.is_eof():
        # The usual case: the whole body came with the headers. Nothing is left to wait
        # for or to count as in flight; its size was bounded while it was read.
        whole = await request.content.read()
        if len(whole) > max_bytes:
            raise PayloadTooLarge(f"Payload Too Large: body over {max_bytes} bytes")
        return whole
    taken = 0
    body = bytearray()
    try:
        if expected is not None:
            budget.take(expected)
            taken = expected
        async with asyncio.timeout(timeout):
            async for data in request.content.iter_any():
                if len(body) + len(data) > max_bytes:
                    raise PayloadTooLarge(f"Payload Too Large: body over {max_bytes} bytes")
                if expected is None:
                    budget.take(len(data))
                    taken += len(data)
                body += data
    except TimeoutError:
        log.info("request_body_timeout", received=len(body), expected=expected, seconds=timeout)
        raise RequestTimeout(
            f"Request Timeout: the body did not arrive within {timeout:g} s"
        ) from None
    finally:
        budget.give_back(taken)
    return bytes(body)


# ---------------------------------------------------------------------- connections
# aiohttp keeps no public record of a request's headers being parsed or of a connection
# waiting for its next request; these read RequestHandler's own state (checked to exist
# when a ConnectionGuard is made, so an aiohttp that renames them fails at start).
_HANDLER_STATE = (
    "_request_count",
    "_waiter",
    QUEUE_SLOT,
    "_next_keepalive_close_time",
    "_keepalive_timeout",
    "_keepalive_handle",
)


def _requests_parsed(handler: RequestHandler) -> int:
    """How many requests' headers aiohttp has parsed on this connection."""
    return handler._request_count


def _keep_alive(handler: RequestHandler) -> None:
    """A request was served beside aiohttp: its keep-alive timer (armed when the connection
    opened, or after its last response) closes the connection only once idle from now."""
    handler._next_keepalive_close_time = handler._loop.time() + handler._keepalive_timeout


def _waiting_for_request(handler: RequestHandler) -> bool:
    """Whether aiohttp is idle between requests (not reading a body, not responding)."""
    waiter = handler._waiter
    return waiter is not None and not waiter.done()


class ConnectionGuard:
    """The protocol factory for ``loop.create_server``: counts connections, refuses those
    past ``max_connections``, and times the reading of each request's headers."""

    def __init__(
        self,
        handler_factory: Callable[[], RequestHandler],
        listen: ListenConfig,
        fast: FastPosts | None = None,
    ):
        """``fast``: the app's fast POSTs (:mod:`proxy.downstream.fast_post`), served
        from an idle connection's bytes before aiohttp sees them."""
        missing = [name for name in _HANDLER_STATE if name not in RequestHandler.__slots__]
        if not callable(getattr(RequestHandler, "_process_keepalive", None)):
            missing.append("_process_keepalive")
        if missing:  # pragma: no cover - only with an aiohttp this was not written for
            raise RuntimeError(f"aiohttp's RequestHandler lacks {missing}: update guard.py")
        self.handler_factory = handler_factory
        self.max_connections = listen.max_connections
        self.header_timeout = listen.header_timeout_seconds
        self.fast = fast
        self.open = 0

    def __call__(self) -> asyncio.Protocol:
        return _GuardedConnection(self)


class _GuardedConnection(asyncio.Protocol):
    """One client connection: aiohttp's protocol inside, the header timer around it."""

    def __init__(self, guard: ConnectionGuard) -> None:
        self._guard = guard
        self._loop = asyncio.get_running_loop()
        self._inner: RequestHandler | None = None  # None: refused
        self._transport: asyncio.Transport | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._parsed_at_arming = 0
        self._heard = False  # a byte of the request being timed arrived
        self._ending: asyncio.TimerHandle | None = None  # answered; closing soon
        # A fast POST being served (fast_post.py): its bytes, and what came after them.
        self._fast: FastCall | None = None
        self._fast_data = b""
        self._fast_next: list[bytes] = []
        self._fast_bytes = 0  # in _fast_next; past _FAST_NEXT_BYTES, reading pauses
        self._writable: asyncio.Future[None] | None = None  # a stream waits: writing paused
        self._paused = False  # the transport paused writing (flow control)

    # ------------------------------------------------------------------ protocol
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = cast(asyncio.Transport, transport)
        guard = self._guard
        if guard.open >= guard.max_connections:
            log.info(
                "connection_refused",
                peer=transport.get_extra_info("peername"),
                open=guard.open,
                max_connections=guard.max_connections,
            )
            self._end(
                Overloaded(
                    f"Too many connections (listen.max_connections={guard.max_connections});"
                    " try again later",
                    reason="too_many_connections",
                )
            )
            return
        guard.open += 1
        self._inner = guard.handler_factory()
        self._inner.connection_made(transport)
        self._arm(self._inner, heard=False)  # the first request's headers are due from now

    def data_received(self, data: bytes) -> None:
        inner = self._inner
        if inner is None or self._ending is not None:
            return  # answered already: what the client still sends is dropped
        if self._fast is not None:  # (a client sending before its answer came: it waits)
            self._fast_next.append(data)
            self._fast_bytes += len(data)
            if self._fast_bytes > _FAST_NEXT_BYTES and self._transport is not None:
                self._transport.pause_reading()  # (a stream may go on for long)
            return
        fast = self._guard.fast
        if (
            fast is not None
            and (self._timer is None or not self._heard)  # aiohttp holds no partial request
            and _waiting_for_request(inner)
            and self._transport is not None
        ):
            if fast.handoffs:
                fast.forget(self._transport)  # one aiohttp answered without taking it
            call = fast.prepare(data, self._transport)
            if call is not None:
                self._disarm()
                self._fast, self._fast_data = call, data
                _keep_alive(inner)  # its idle timer runs from this request (ms long)
                call.start(self._fast_done, self)
                return
        self._to_inner(inner, data)

    def _fast_done(self, answered: bool) -> None:
        data, following = self._fast_data, self._fast_next
        self._fast, self._fast_data, self._fast_next = None, b"", []
        inner = self._inner
        if inner is None:
            return
        if self._fast_bytes:
            if self._fast_bytes > _FAST_NEXT_BYTES and self._transport is not None:
                self._transport.resume_reading()
            self._fast_bytes = 0
        if not answered:  # handed off: aiohttp serves the request after all
            self._to_inner(inner, data)
        for more in following:
            self.data_received(more)

    def _to_inner(self, inner: RequestHandler, data: bytes) -> None:
        # The first byte of the next request starts its timer; armed only when these bytes
        # did not complete its headers (the usual request comes whole: no timer at all).
        idle = self._timer is None and _waiting_for_request(inner)
        parsed = _requests_parsed(inner)
        self._heard = True
        inner.data_received(data)
        quiet_refusal(inner)  # a request aiohttp could not parse: answered without its bytes
        if idle:
            if _requests_parsed(inner) == parsed and self._inner is inner and not self._ending:
                self._arm(inner, heard=True, parsed=parsed)
        elif self._timer is not None and _requests_parsed(inner) != self._parsed_at_arming:
            self._disarm()

    def eof_received(self) -> bool | None:
        if self._inner is not None and self._ending is None:
            self._inner.eof_received()
        return None  # close our side too, as aiohttp does

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        writable, self._writable = self._writable, None
        if writable is not None and not writable.done():
            writable.set_exception(ConnectionResetError("the client is gone"))
            writable.exception()  # (its waiter, if still there, gets it: nothing to log)
        if self._fast is not None:
            self._fast.lost()
        if self._ending is not None:
            self._ending.cancel()
        inner, self._inner = self._inner, None
        if inner is not None:
            self._guard.open -= 1
            inner.connection_lost(exc)
        fast = self._guard.fast
        if fast is not None and fast.handoffs and self._transport is not None:
            fast.forget(self._transport)

    def pause_writing(self) -> None:
        self._paused = True
        if self._inner is not None:
            self._inner.pause_writing()

    def resume_writing(self) -> None:
        self._paused = False
        writable, self._writable = self._writable, None
        if writable is not None and not writable.done():
            writable.set_result(None)
        if self._inner is not None:
            self._inner.resume_writing()

    # ------------------------------------------------------------------ a fast stream
    async def drained(self) -> None:
        """Return once the transport takes more bytes (at once unless it paused writing),
        as aiohttp's writer waits; ``ConnectionResetError`` once the connection is lost
        (:class:`~proxy.downstream.fast_stream.Wire`)."""
        if self._inner is None:
            raise ConnectionResetError("the client is gone")
        if not self._paused:
            return
        if self._writable is None:
            self._writable = self._loop.create_future()
        await asyncio.shield(self._writable)  # (one waiter; shielded: it may be cancelled)

    def streaming(self) -> None:
        """A fast POST's stream begins: aiohttp, which sees an idle connection, must not
        close it for being idle (its keep-alive timer stops) until :meth:`idle`."""
        inner = self._inner
        if inner is not None and inner._keepalive_handle is not None:
            inner._keepalive_handle.cancel()
            inner._keepalive_handle = None

    def idle(self) -> None:
        """The stream ended: the keep-alive timer runs from now, as after aiohttp's own
        responses."""
        inner = self._inner
        if inner is not None:
            _keep_alive(inner)
            if inner._keepalive_handle is None and inner._keepalive_timeout > 0:
                close_at = inner._next_keepalive_close_time
                inner._keepalive_handle = self._loop.call_at(close_at, inner._process_keepalive)

    # ------------------------------------------------------------------ header timer
    def _arm(self, inner: RequestHandler, *, heard: bool, parsed: int | None = None) -> None:
        """Time the headers of the request after the ``parsed`` first (default: all so far)."""
        self._parsed_at_arming = _requests_parsed(inner) if parsed is None else parsed
        self._heard = heard
        self._timer = self._loop.call_later(self._guard.header_timeout, self._headers_late)

    def _disarm(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _headers_late(self) -> None:
        self._timer = None
        inner, transport = self._inner, self._transport
        if inner is None or transport is None or transport.is_closing() or self._ending:
            return
        if _requests_parsed(inner) != self._parsed_at_arming:
            return  # parsed after all (a pipelined request aiohttp read on its own)
        seconds = self._guard.header_timeout
        peer = transport.get_extra_info("peername")
        log.info("request_header_timeout", peer=peer, partial=self._heard, seconds=seconds)
        if not self._heard:
            transport.close()  # nothing was asked: nothing to answer
            return
        self._end(RequestTimeout(f"Request Timeout: headers not complete within {seconds:g} s"))

    def _end(self, error: ProxyError) -> None:
        """Answer ``error`` and close: at once once the client has read it and closed its
        side, else after a short linger."""
        transport = self._transport
        assert transport is not None
        transport.write(raw_error_response(error))
        if transport.can_write_eof():
            transport.write_eof()
        self._ending = self._loop.call_later(_LINGER_SECONDS, transport.close)
