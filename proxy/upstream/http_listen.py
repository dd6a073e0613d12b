"""The standalone ``GET`` stream of one Streamable HTTP upstream session, read by
callbacks: while it is open no task runs for it (DESIGN.md U2).

2025-11-25 basic/transports §Listening for Messages from the Server: the server sends on
it what belongs to no request (list_changed, resource updates, log messages). With
``upstream.standalone_stream: open`` every session keeps one open, idle or not, so that
nothing the server sends is lost while no client listens (the core keeps it for the
client's next ``GET``). Over 10,000 idle sessions its cost is the proxy's memory: an
``aiohttp`` response kept open was ~15 KB a session traced (issue 23, ``bench/README.md``:
the response and its request with their headers, which the C parser keeps too, a
``StreamReader`` and the protocol's queue with a deque each, a task and six frames waiting
in ``readany``). Here the stream is an :class:`asyncio.Protocol`: ``h11`` parses the
response (sans-I/O), :class:`~proxy.core.sse.SSEDecoder` the events, and each message goes
to the session from ``data_received``. A task runs only to connect and to wait before
connecting again.

``aiohttp`` still carries every other request. What it does that this does not: follow a
redirect, decode a ``Content-Encoding``. Answered either, the listener reads the stream with
``aiohttp`` from then on (:meth:`ListenHost.get`, one task while it is open), as before.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import ssl
from collections.abc import Coroutine
from typing import Any, Protocol

import aiohttp
import h11
import structlog
from aiohttp.http import SERVER_SOFTWARE

from proxy.backoff import Backoff
from proxy.core.errors import ProxyError
from proxy.core.jsonrpc import Message
from proxy.core.sse import SSEDecodeError, SSEDecoder
from proxy.upstream.http_body import (
    NETWORK_ERRORS,
    SSE,
    Cursor,
    Sink,
    never,
    take_events,
    tls_failure,
    why_failed,
)
from proxy.upstream.http_endpoint import Endpoint
from proxy.upstream.http_expiry import SessionExpiry

log = structlog.get_logger("proxy.upstream.http")

REDIRECTS = frozenset({301, 302, 303, 307, 308})
_tls: ssl.SSLContext | None = None  # one for the process: made for the first https URL


class ListenHost(Protocol):
    """What the listener needs of :class:`~proxy.upstream.http.HttpUpstream`."""

    @property
    def label(self) -> str: ...

    def spawn(self, coro: Coroutine[Any, Any, Any], what: str) -> asyncio.Task[Any]: ...

    def deliver(self, msg: Message) -> None:
        """A message of the standalone stream (origin None)."""

    async def get(self, cursor: Cursor, sink: Sink) -> int | None:
        """One ``GET`` stream read with ``aiohttp`` to its end; the status if refused."""


class _Refused(Exception):
    """The ``GET`` was answered with something other than an SSE stream."""

    def __init__(self, status: int, fall_back: bool) -> None:
        super().__init__(status)
        self.status = status
        self.fall_back = fall_back  # aiohttp may read it (a redirect, an encoded body)


class StandaloneListener:
    """The standalone stream of one upstream session: open it, read it, open it again
    after it ends (from its last event id, §Resumability), until :meth:`close`."""

    __slots__ = (
        "_aiohttp",
        "_backoff",
        "_cursor",
        "_endpoint",
        "_expiry",
        "_host",
        "_stream",
        "_task",
    )

    def __init__(self, host: ListenHost, endpoint: Endpoint, expiry: SessionExpiry) -> None:
        self._host = host
        self._endpoint = endpoint
        self._expiry = expiry  # closed: no more; reachable or not: the health
        self._cursor = Cursor()
        self._backoff = Backoff()
        self._task: asyncio.Task[Any] | None = None
        self._stream: SseGet | None = None  # open, read by callbacks
        self._aiohttp = False  # read with aiohttp (the server redirects or encodes)

    def open(self) -> None:
        """Open the stream, unless it is open or being opened."""
        if self._task is None and self._stream is None:
            self._task = self._host.spawn(self._run(0.0), "listen")

    def reopen(self) -> None:
        """Open it on a new upstream session (its event ids are not the old one's)."""
        self.close()
        self._cursor, self._backoff = Cursor(), Backoff()
        self.open()

    def close(self) -> None:
        """Close the stream, and stop opening it."""
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
        stream, self._stream = self._stream, None
        if stream is not None:
            stream.abort()

    def pause(self) -> None:
        if self._stream is not None:
            self._stream.pause()

    def resume(self) -> None:
        if self._stream is not None:
            self._stream.resume()

    # ------------------------------------------------------------------ the stream's
    def ended(self, stream: SseGet) -> None:
        """``stream`` ended (the server closed it, or the connection broke): open it again
        after the server's ``retry``, else a backoff delay."""
        if stream is not self._stream:  # closed by close(): nothing more
            return
        self._stream = None
        if self._expiry.closed is None and self._task is None:
            self._task = self._host.spawn(self._run(self._delay()), "listen")

    def failed(self, stream: SseGet) -> None:
        """Delivering a message raised (a bug, logged): the stream is not opened again,
        as a failed listen task was not."""
        if stream is self._stream:
            self._stream = None

    def deliver(self, msg: Message) -> None:
        self._host.deliver(msg)

    @property
    def label(self) -> str:
        return self._host.label

    @property
    def cursor(self) -> Cursor:
        return self._cursor

    # ------------------------------------------------------------------ opening
    def _delay(self) -> float:
        cursor = self._cursor
        if cursor.progressed:
            self._backoff.reset()
        return cursor.retry_ms / 1000 if cursor.retry_ms is not None else self._backoff.next_delay()

    async def _run(self, delay: float) -> None:
        """Open the stream (again), retrying while the server cannot be reached; with
        ``aiohttp``, read it too."""
        try:
            if delay:
                await asyncio.sleep(delay)
            while self._expiry.closed is None:
                try:
                    if not self._aiohttp:
                        await self._open()
                        if self._stream is not None:
                            return  # open: read by callbacks from now on
                        await asyncio.sleep(self._delay())  # it ended already: again
                        continue
                    refused = await self._host.get(self._cursor, self.deliver)
                    if refused is not None:
                        raise _Refused(refused, False)
                    await asyncio.sleep(self._delay())  # it ended: again
                except _Refused as exc:
                    if exc.status >= 500:
                        self._expiry.unreachable(f"HTTP {exc.status}")
                        await asyncio.sleep(self._backoff.next_delay())
                    elif exc.fall_back and not self._aiohttp:
                        log.info("upstream_standalone_via_aiohttp", session=self._host.label)
                        self._aiohttp = True
                    else:  # 405: the server has none; 404: a POST will find out
                        log.info(
                            "upstream_no_standalone_stream",
                            session=self._host.label,
                            status=exc.status,
                        )
                        return
                except (*NETWORK_ERRORS, h11.ProtocolError) as exc:
                    self._expiry.unreachable(_why(exc))
                    await asyncio.sleep(self._backoff.next_delay())
        finally:
            if self._task is asyncio.current_task():
                self._task = None

    async def _open(self) -> None:
        """Connect, send the ``GET``, and wait for its answer's head: an SSE stream is
        left to :class:`SseGet`; anything else raises :class:`_Refused`."""
        endpoint = self._endpoint
        with contextlib.suppress(ProxyError):  # else the server refuses it: a status
            await endpoint.authorize()
        url = endpoint.url
        stream = SseGet(self, _request(endpoint, self._cursor.last_id), endpoint)
        tls = _tls_context() if url.scheme == "https" else None
        host = url.raw_host or ""
        self._stream = stream  # from now on: what ended() and close() look for
        try:
            async with asyncio.timeout(endpoint.connect_timeout):
                await asyncio.get_running_loop().create_connection(
                    lambda: stream,
                    host,
                    url.port or 80,
                    ssl=tls,
                    server_hostname=host if tls else None,
                )
            await stream.head
        except BaseException:
            if self._stream is stream:
                self._stream = None
            stream.abort()
            raise
        self._expiry.reachable()
        if endpoint.paused:
            stream.pause()


class SseGet(asyncio.Protocol):
    """One ``GET`` SSE stream: the request is written once connected; the response is
    parsed by ``h11`` as it comes, its events handed to the listener. ``head`` is done
    once the answer's head is read: None for an SSE stream (then the events follow),
    :class:`_Refused` otherwise (the connection is closed)."""

    __slots__ = ("_decoder", "_endpoint", "_http", "_listener", "_request", "_transport", "head")

    def __init__(self, listener: StandaloneListener, request: h11.Request, endpoint: Endpoint):
        self._listener = listener
        self._endpoint = endpoint
        self._http = h11.Connection(h11.CLIENT)
        self._request: bytes | None = b"".join(
            self._http.send(e) or b"" for e in (request, h11.EndOfMessage())
        )
        self._decoder: SSEDecoder | None = None  # made for an SSE answer
        self._transport: asyncio.Transport | None = None
        self.head: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport) and self._request is not None
        self._transport = transport
        transport.write(self._request)
        self._request = None

    def data_received(self, data: bytes) -> None:
        self._http.receive_data(data)
        self._read()

    def eof_received(self) -> bool:
        self._http.receive_data(b"")
        self._read()
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        self._transport = None
        if not self.head.done():
            self.head.set_exception(exc or aiohttp.ServerDisconnectedError())
        else:
            self._listener.ended(self)

    def pause(self) -> None:
        """Stop reading: TCP backpressure then holds the server back."""
        if self._transport is not None:
            self._transport.pause_reading()

    def resume(self) -> None:
        if self._transport is not None and not self._transport.is_reading():
            self._transport.resume_reading()

    def abort(self) -> None:
        if self._transport is not None:
            self._transport.abort()
        if not self.head.done():
            self.head.cancel()
        elif not self.head.cancelled():
            self.head.exception()  # seen: never "exception was never retrieved"

    def _read(self) -> None:
        """Each event ``h11`` has read so far; none once the connection is going."""
        http = self._http
        try:
            while self._transport is not None and not self._transport.is_closing():
                event = http.next_event()
                if event is h11.NEED_DATA or event is h11.PAUSED:
                    return
                if isinstance(event, h11.Response):
                    self._answered(event)
                elif isinstance(event, h11.Data) and self._decoder is not None:
                    self._events(event.data)
                elif isinstance(event, h11.EndOfMessage | h11.ConnectionClosed):
                    self._transport.close()  # the server ended it: connection_lost follows
        except (h11.RemoteProtocolError, SSEDecodeError) as exc:
            self._fail(exc)
        except Exception:  # a bug: log it, never crash the proxy
            log.exception("upstream_task_failed", session=self._listener.label, task="listen")
            self._listener.failed(self)
            self.abort()

    def _answered(self, response: h11.Response) -> None:
        status = response.status_code
        set_cookie, content_type, encoding = [], b"", b"identity"
        for name, value in response.headers:
            if name == b"set-cookie":
                set_cookie.append(value.decode("latin-1"))
            elif name == b"content-type":
                content_type = value.split(b";", 1)[0].strip().lower()
            elif name == b"content-encoding":
                encoding = value.strip().lower()
        self._endpoint.keep_cookies(set_cookie)
        if status == 200 and content_type == SSE.encode() and encoding == b"identity":
            self._decoder = SSEDecoder(self._endpoint.max_line_bytes)
            self._listener.cursor.progressed = False
            if not self.head.done():
                self.head.set_result(None)
            return
        fall_back = status in REDIRECTS or (status == 200 and encoding != b"identity")
        if not self.head.done():
            self.head.set_exception(_Refused(status, fall_back))
        self.abort()

    def _events(self, data: bytes | bytearray) -> None:
        assert self._decoder is not None
        listener = self._listener
        events = self._decoder.feed(data)  # type: ignore[arg-type]  # a bytearray reads alike
        take_events(events, listener.label, listener.cursor, listener.deliver, never)
        if self._decoder.error is not None:  # after the events before the bad line
            raise self._decoder.error

    def _fail(self, exc: Exception) -> None:
        """A response that cannot be read: the connection is dropped (then opened again)."""
        if not self.head.done():
            self.head.set_exception(exc)
        if self._transport is not None:
            self._transport.abort()


def _request(endpoint: Endpoint, last_event_id: str | None) -> h11.Request:
    """The ``GET``, with what ``aiohttp`` would send: the endpoint's headers (the session,
    revision, token, configured ones), its cookies, the URL's userinfo as Basic auth; and
    no ``Content-Encoding`` asked for."""
    url = endpoint.url
    sent = endpoint.headers(SSE, last_event_id)
    if url.raw_user or url.raw_password:  # as aiohttp does: it replaces any other
        sent = {k: v for k, v in sent.items() if k.lower() != "authorization"}
        sent["Authorization"] = _basic(url.user or "", url.password or "")
    names = {k.lower() for k in sent}
    defaults = [
        ("Host", url.host_port_subcomponent or ""),
        ("User-Agent", SERVER_SOFTWARE),
        ("Accept-Encoding", "identity"),
    ]
    headers = [(k, v) for k, v in defaults if k.lower() not in names]
    headers += sent.items()
    if (cookie := endpoint.cookie_header()) is not None:
        headers.append(("Cookie", cookie))
    return h11.Request(method="GET", target=url.raw_path_qs or "/", headers=headers)


def _basic(user: str, password: str) -> str:
    """RFC 7617 credentials, encoded as aiohttp's ``BasicAuth`` encodes them (latin-1)."""
    return "Basic " + base64.b64encode(f"{user}:{password}".encode("latin1")).decode()


def _tls_context() -> ssl.SSLContext:
    global _tls
    if _tls is None:
        _tls = ssl.create_default_context()  # what aiohttp verifies with
    return _tls


def _why(exc: BaseException) -> str:
    """A failure to connect or read, in words, without the URL."""
    if isinstance(exc, h11.ProtocolError):
        # h11 quotes the bad line after ": " (up to its 16 KiB bound): the server's bytes,
        # or an echo of ours, are not for the health or the log.
        return f"bad HTTP answer ({str(exc).partition(': ')[0]})"
    if (tls := tls_failure(exc)) is not None:  # worded as the POSTs' (http_body.py)
        return tls
    if isinstance(exc, OSError) and not isinstance(exc, aiohttp.ClientError | TimeoutError):
        return f"cannot connect ({exc.strerror or type(exc).__name__})"
    return why_failed(exc)
