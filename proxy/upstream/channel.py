"""What the upstreams whose connection *is* the upstream session share (legacy SSE, U3;
WebSocket, U4).

Neither transport can resume: when the connection drops, whatever the server was doing
is gone. :class:`ChannelUpstream` then answers every request in flight with a JSON-RPC
error, reports the failure to ``/healthz``, reconnects with :class:`Backoff` for at most
``reconnect_max_seconds``, and re-initializes the new upstream session by itself: it
replays the client's cached ``initialize`` under an id of its own (the answer is consumed
here) and ``notifications/initialized``, so the client's session goes on. If reconnection
gives up, ``on_closed("upstream unreachable: ...")`` ends the client session.
"""

from __future__ import annotations

import asyncio
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import structlog

from proxy.backoff import Backoff
from proxy.core import jsonrpc
from proxy.core.errors import ProxyError, UpstreamStartFailed
from proxy.core.handshake import HandshakeStep, client_params
from proxy.core.jsonrpc import Kind, Message
from proxy.upstream.base import InFlight, UpstreamContext, messages_of
from proxy.upstream.handshake import initialize
from proxy.upstream.http_body import tls_failure

log = structlog.get_logger("proxy.upstream")

_REINIT_ID = "mcp-resume-proxy/reinitialize/"  # core ids upstream are ints: no clash


class ConnectFailed(Exception):
    """A connection (or the re-initialization on it) could not be established."""


class DeliveryFailed(Exception):
    """One message could not be handed to the server (its request gets an error)."""


def redact_url(url: str) -> str:
    """``url`` without user info, query or fragment: those may carry credentials."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    netloc = f"[{host}]" if ":" in host else host
    if parts.port is not None:
        netloc += f":{parts.port}"
    return urlunsplit((parts.scheme, netloc, parts.path, "", ""))


class ChannelUpstream:
    """An upstream whose one connection is its session: reconnect and re-initialize.

    Subclasses implement ``_connect`` (open, bounded by the caller's timeout),
    ``_receive`` (read until the connection is lost, then return why), ``_deliver`` (hand
    one message over, or raise :class:`DeliveryFailed`) and ``_disconnect``.
    """

    transport = "channel"

    def __init__(self, context: UpstreamContext) -> None:
        self._context = context
        self._url = context.config.url or ""
        self._headers = context.config.resolved_headers()  # never logged
        self._inflight = InFlight(context.on_message, context.label)
        self._outbox: asyncio.Queue[tuple[bytes, HandshakeStep | None]] = asyncio.Queue()
        self._connected = asyncio.Event()  # the writer delivers only while set
        self._readable = asyncio.Event()  # cleared: overflow: block holds the server back
        self._readable.set()
        self.pending_bytes = 0  # queued for the server, not yet handed over
        self._init_request: dict[str, Any] | None = None  # the client's, once answered
        self._init_pending: tuple[Any, dict[str, Any]] | None = None
        self._initialized_sent = False
        self._reinit: tuple[str, asyncio.Future[Message]] | None = None
        self._reinit_count = 0
        self._receiver: asyncio.Task[str] | None = None
        self._tasks: list[asyncio.Task[Any]] = []
        self._stopping = False
        self._closed_reported = False

    @property
    def pid(self) -> int | None:
        return None

    def describe(self) -> str:
        return redact_url(self._url)

    def _scrub(self, text: str) -> str:
        """An error text without the URLs we use in full (they may carry credentials)."""
        for url in self._secret_urls():
            text = text.replace(url, redact_url(url))
        return text

    def _secret_urls(self) -> list[str]:
        return [self._url]

    # ------------------------------------------------------------------ lifecycle
    async def start(self) -> None:
        """Connect; raise :class:`UpstreamStartFailed` (502) if the server is unreachable."""
        try:
            await self._open()
        except ConnectFailed as exc:
            error = self._scrub(str(exc))
            await self._disconnect()
            await self._shutdown()
            self._context.health.failing(f"cannot reach MCP server {self.describe()}: {error}")
            log.warning(
                "upstream_unreachable",
                session=self._context.label,
                url=self.describe(),
                error=error,
            )
            raise UpstreamStartFailed(
                f"cannot reach MCP server {self.describe()}: {error}"
            ) from None
        self._context.health.ok()
        log.info(
            "upstream_connected",
            session=self._context.label,
            transport=self.transport,
            url=self.describe(),
        )
        self._connected.set()
        name = self._context.label
        self._tasks = [
            asyncio.create_task(self._supervise(), name=f"{self.transport}-supervise-{name}"),
            asyncio.create_task(self._write_loop(), name=f"{self.transport}-write-{name}"),
        ]

    async def stop(self) -> None:
        """End every task and the connection; returns once they are gone."""
        self._stopping = True
        self._connected.clear()
        tasks = [t for t in (*self._tasks, self._receiver) if t is not None]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        receiver = self._receiver  # one the supervisor may have opened meanwhile
        if receiver is not None and not receiver.done():
            receiver.cancel()
            await asyncio.gather(receiver, return_exceptions=True)
        await self._disconnect()
        await self._shutdown()
        self._report_closed("stopped")

    def pause(self) -> None:
        """Stop reading from the server; it is held back by the transport's flow control."""
        self._readable.clear()

    def resume(self) -> None:
        self._readable.set()

    def send(self, payload: bytes, handshake: HandshakeStep | None = None) -> None:
        """Queue one message; the writer delivers them in order (never blocks or raises).
        ``handshake`` marks the client's own, replayed on a new upstream session."""
        if not self._stopping and not self._closed_reported:
            self.pending_bytes += len(payload)
            self._outbox.put_nowait((payload, handshake))

    # ------------------------------------------------------------------ hooks
    async def _connect(self) -> None:
        raise NotImplementedError

    async def _receive(self) -> str:
        raise NotImplementedError

    async def _deliver(self, payload: bytes) -> None:
        raise NotImplementedError

    async def _disconnect(self) -> None:
        """Let go of the current connection (idempotent)."""

    async def _shutdown(self) -> None:
        """Let go of what outlives connections (an HTTP client), after the last one."""

    # ------------------------------------------------------------------ connection
    async def _open(self) -> None:
        try:
            async with asyncio.timeout(self._context.config.connect_timeout_seconds):
                await self._connect()
        except TimeoutError:
            raise ConnectFailed(
                f"no connection within {self._context.config.connect_timeout_seconds:g}s"
            ) from None
        self._receiver = asyncio.create_task(
            self._receive(), name=f"{self.transport}-read-{self._context.label}"
        )

    async def _supervise(self) -> None:
        """Wait for the connection to drop; then fail what is in flight and reconnect."""
        while True:
            assert self._receiver is not None
            try:
                reason = await self._receiver
            except Exception as exc:  # a bug in a reader must not leave the session hanging
                log.exception("upstream_reader_failed", session=self._context.label)
                reason = f"internal error: {exc!r}"
            self._connected.clear()
            await self._disconnect()
            if self._stopping:
                return
            reason = self._scrub(reason)
            log.warning(
                "upstream_connection_lost",
                session=self._context.label,
                transport=self.transport,
                url=self.describe(),
                reason=reason,
                in_flight=len(self._inflight.ids),
            )
            self._context.health.failing(f"connection to MCP server lost: {reason}")
            # The session died with its connection: no answer can come any more.
            self._inflight.fail_all(f"MCP server connection lost: {reason}")
            error = await self._reconnect()
            if error is not None:
                log.warning(
                    "upstream_unreachable",
                    session=self._context.label,
                    url=self.describe(),
                    error=error,
                )
                self._context.health.failing(f"MCP server unreachable: {error}")
                self._report_closed(f"upstream unreachable: {error}")
                return

    async def _reconnect(self) -> str | None:
        """Reconnect and re-initialize; None on success, else the last error."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self._context.config.reconnect_max_seconds
        backoff = Backoff()
        error = "gave up"
        attempts = 0
        while loop.time() < deadline:
            await asyncio.sleep(min(backoff.next_delay(), max(0.0, deadline - loop.time())))
            attempts += 1
            try:
                await self._open()
                await self._replay_handshake()
            except ConnectFailed as exc:
                error = self._scrub(str(exc))
                log.debug("upstream_reconnect_failed", session=self._context.label, error=error)
                if self._receiver is not None and not self._receiver.done():
                    self._receiver.cancel()
                    await asyncio.gather(self._receiver, return_exceptions=True)
                await self._disconnect()
                continue
            self._context.health.ok()
            log.info(
                "upstream_reconnected",
                session=self._context.label,
                url=self.describe(),
                attempts=attempts,
                reinitialized=self._init_request is not None,
            )
            self._connected.set()
            return None
        return error

    async def _replay_handshake(self) -> None:
        """Lifecycle §Initialization on the new session with the client's own params,
        answered to us, not the client (the one driver,
        :func:`proxy.upstream.handshake.initialize`)."""
        if self._init_request is None:
            return  # the client has not initialized yet: it will
        params = client_params(self._init_request)
        timeout = self._context.config.connect_timeout_seconds
        try:
            await initialize(self._ask_replayed, self._notify_replayed, params, timeout)
        except UpstreamStartFailed as exc:  # refused: this connection will not do
            raise ConnectFailed(f"replayed: {exc.message}") from None

    async def _ask_replayed(self, method: str, params: dict[str, Any], timeout: float) -> Message:
        """A request of the proxy's own on the new connection; its answer is kept here."""
        assert self._receiver is not None
        self._reinit_count += 1
        rid = f"{_REINIT_ID}{self._reinit_count}"
        answer: asyncio.Future[Message] = asyncio.get_running_loop().create_future()
        self._reinit = (rid, answer)
        try:
            request = {"jsonrpc": "2.0", "id": rid, "method": method, "params": params}
            await self._deliver_or_fail(jsonrpc.encode(request))
            # Until it is answered, or the new connection drops too.
            waiters: set[asyncio.Future[Any]] = {answer, self._receiver}
            await asyncio.wait(waiters, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
            if not answer.done() or answer.cancelled():
                raise ConnectFailed(f"no answer to the replayed {method}")
            return answer.result()
        finally:
            self._reinit = None

    async def _notify_replayed(self, message: dict[str, Any]) -> None:
        """``notifications/initialized`` again, if the client had got that far (else its
        own is still to come)."""
        if self._initialized_sent:
            await self._deliver_or_fail(jsonrpc.encode(message))

    async def _deliver_or_fail(self, payload: bytes) -> None:
        try:
            await self._deliver(payload)
        except DeliveryFailed as exc:
            raise ConnectFailed(str(exc)) from None

    # ------------------------------------------------------------------ messages
    async def _write_loop(self) -> None:
        """The one writer: messages go out in ``send`` order, only while connected."""
        while True:
            payload, handshake = await self._outbox.get()
            await self._connected.wait()
            rid = self._inflight.sent(payload)
            self._note_handshake(rid, payload, handshake)
            try:
                await self._deliver(payload)
            except DeliveryFailed as exc:
                error = self._scrub(str(exc))
                if rid is not None:
                    self._inflight.fail(rid, f"MCP server did not take the request: {error}")
                else:
                    log.warning(
                        "upstream_message_dropped", session=self._context.label, error=error
                    )
            finally:
                self.pending_bytes -= len(payload)

    def _note_handshake(self, rid: Any, payload: bytes, handshake: HandshakeStep | None) -> None:
        """Remember the client's handshake (as the core marked it), to replay it on a new
        upstream session; its initialize counts once answered with a result."""
        if handshake is HandshakeStep.INITIALIZE and rid is not None:
            self._init_pending = (rid, jsonrpc.decode(payload))
        elif handshake is HandshakeStep.INITIALIZED:
            self._initialized_sent = True

    def _received_data(self, data: bytes | str) -> None:
        """One SSE event's data or text frame: a message or a batch (2024-11-05 allows).

        What is not JSON-RPC is logged and skipped; the session goes on.
        """
        for msg in messages_of(data, self._skipped):
            self._received(msg)

    def _skipped(self, data: bytes | str, exc: ProxyError) -> None:
        text = data if isinstance(data, str) else data.decode(errors="replace")
        log.warning(
            "upstream_message_skipped",
            session=self._context.label,
            error=exc.message,
            data=text[:200],
        )

    def _received(self, msg: Message) -> None:
        if msg.kind is Kind.RESPONSE:
            if self._reinit is not None and msg.id == self._reinit[0]:
                if not self._reinit[1].done():
                    self._reinit[1].set_result(msg)
                return  # the answer to our own replayed initialize
            if self._init_pending is not None and msg.id == self._init_pending[0]:
                if not msg.is_error:
                    self._init_request = self._init_pending[1]
                self._init_pending = None
        self._inflight.answered(msg)
        try:
            self._context.on_message(msg, None)
        except ProxyError as exc:
            log.warning("upstream_message_refused", session=self._context.label, error=exc.message)

    def _report_closed(self, reason: str) -> None:
        if self._closed_reported:
            return
        self._closed_reported = True
        log.info("upstream_stopped", session=self._context.label, reason=reason)
        self._context.on_closed(reason)


def describe_error(exc: BaseException) -> str:
    """An exception for a log or an error message: its text, else its type; a failed TLS
    handshake as the HTTP upstream words it (never aiohttp's text: it names the host)."""
    if (tls := tls_failure(exc)) is not None:
        return tls
    text = str(exc)
    name = type(exc).__name__
    return f"{name}: {text}" if text else name
