"""A Streamable HTTP MCP server at a URL (DESIGN.md U2), revisions 2025-03-26 … 2025-11-25.

The proxy is the client here (2025-11-25 basic/transports §Streamable HTTP). Each message
is its own POST, sent in the order ``send`` was called (one writer; it waits only until a
POST's body is written, so a long answer never holds up the next message). Each open
response is read by its own task, and what it carries belongs to its request (DESIGN §5
rule 3): ``on_message(msg, origin=<request id>)``. The standalone GET stream carries the
rest (origin None), read by callbacks (:mod:`proxy.upstream.http_listen`); with
``upstream.standalone_stream: on_client_get`` it is opened only once the client listens
(:meth:`HttpUpstream.listen_standalone`). Every task and response ends in
:meth:`HttpUpstream.stop`, which gives back the ``aiohttp`` client all sessions share
(:mod:`proxy.upstream.http_client`). An idle session runs no task: the writer runs only
while there is something to POST, and an open standalone stream needs none.

Recovery, per the spec:

- §Resumability: a request's SSE response that drops before its answer is resumed with
  ``GET`` + ``Last-Event-ID`` if the server gave event ids (its ``retry`` is respected),
  within ``reconnect_max_seconds``; otherwise the request gets a JSON-RPC error.
- §Session Management: ``404`` on a POST carrying ``Mcp-Session-Id`` means the session
  expired. With no other request in flight the proxy initializes a new upstream session
  by itself (the cached ``initialize``) and re-sends the message; with work in flight that
  work is lost: it gets errors and the client session ends.
- Unreachable (refused, timed out, 5xx): the message's request gets an error, health turns
  ``failing`` until the next success; unreachable for ``reconnect_max_seconds`` ends the
  session.

:class:`HttpUpstream` moves the messages; it holds an
:class:`~proxy.upstream.http_endpoint.Endpoint` (URL, headers, session id, client) and a
:class:`~proxy.upstream.http_expiry.SessionExpiry` (the last two points).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from collections.abc import Callable, Coroutine
from typing import Any

import aiohttp
import structlog

from proxy import tracing
from proxy.backoff import Backoff
from proxy.core import jsonrpc
from proxy.core.errors import ProxyError
from proxy.core.handshake import HandshakeStep
from proxy.core.jsonrpc import Kind, Message
from proxy.core.protocol import SESSION_HEADER
from proxy.upstream.base import InFlight, UpstreamContext
from proxy.upstream.http_body import (
    EXPIRED,
    NETWORK_ERRORS,
    POST_ACCEPT,
    SSE,
    BadBody,
    Cursor,
    Sink,
    never,
    setter,
    why_failed,
)
from proxy.upstream.http_endpoint import Endpoint
from proxy.upstream.http_expiry import SessionExpiry
from proxy.upstream.http_listen import StandaloneListener
from proxy.upstream.oauth import UpstreamUnauthorized, refusal

log = structlog.get_logger("proxy.upstream.http")


class HttpUpstream:
    """One upstream MCP session over Streamable HTTP."""

    def __init__(self, context: UpstreamContext) -> None:
        self._context = context
        self._endpoint = Endpoint(context)
        self._inflight = InFlight(self._deliver_error, context.label)
        self._expiry = SessionExpiry(self, self._endpoint, context, self._inflight)
        # Queued to POST, in order; the writer runs only while it holds something (an
        # idle session has no task for it).
        self._outbox: deque[tuple[bytes, HandshakeStep | None]] | None = None
        self._writer: asyncio.Task[Any] | None = None
        self._tasks: set[asyncio.Task[Any]] = set()
        self._listener: StandaloneListener | None = None  # made when first wanted
        # upstream.standalone_stream: the GET stream is opened at once, or when the client
        # first listens (listen_standalone); only once the upstream session is initialized.
        self._listen_wanted = context.config.standalone_stream == "open"
        self._initialized = False
        self._stopping = False
        self.pending_bytes = 0  # queued to POST, not yet written

    @property
    def pid(self) -> int | None:
        return None

    def describe(self) -> str:
        return self._endpoint.describe()

    async def start(self) -> None:
        """Prepare the client; nothing connects yet (the first POST is ``initialize``).
        With ``upstream.oauth``, a token first: none (``UpstreamUnauthorized``) fails the
        start, so the client's ``initialize`` gets 502 saying what to do."""
        await self._endpoint.open()
        try:
            await self._endpoint.authorize()
        except BaseException as exc:
            await self._endpoint.close()
            if isinstance(exc, ProxyError):
                self._context.health.failing(exc.message)
            raise

    def send(self, payload: bytes, handshake: HandshakeStep | None = None) -> None:
        """Queue one message; POSTs leave in this order. The client's ``initialize``
        (``handshake``) opens the upstream session and is kept to re-initialize one."""
        if not self._stopping:
            self.pending_bytes += len(payload)
            if self._outbox is None:  # an empty deque is 0.6 KB: none while idle
                self._outbox = deque()
            self._outbox.append((payload, handshake))
            if self._writer is None:
                self._writer = self.spawn(self._write(), "writer")

    def pause(self) -> None:
        """Stop reading response bodies: TCP backpressure then holds the server back."""
        self._endpoint.pause()
        if self._listener is not None:
            self._listener.pause()

    def resume(self) -> None:
        self._endpoint.resume()
        if self._listener is not None:
            self._listener.resume()

    async def stop(self) -> None:
        """Cancel every task, close the standalone stream, say goodbye (``DELETE``,
        §Session Management 5), close."""
        self._stopping = True
        if self._listener is not None:
            self._listener.close()
        while self._tasks:  # a task being cancelled may have spawned another
            tasks = list(self._tasks)
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
        if await self._endpoint.close():
            log.info("upstream_stopped", session=self._context.label)

    # ------------------------------------------------------------------ for SessionExpiry
    def spawn(
        self, coro: Coroutine[Any, Any, Any], what: str, msg: Message | None = None
    ) -> asyncio.Task[Any]:
        """Run ``coro`` as one of this transport's tasks (see :class:`SessionHost`)."""
        name = f"http-{what}-{self._context.label}"
        task = asyncio.create_task(self._guarded(coro, what, msg), name=name)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        # A task cancelled before it ran (at stop) never started ``coro``: close it, so
        # that it is not reported as never awaited (a no-op once it has run).
        task.add_done_callback(lambda _: coro.close())
        return task

    def listen_standalone(self) -> None:
        """The client listens for what the server sends outside any request
        (``upstream.standalone_stream: on_client_get``): open the GET stream now, or once
        the upstream session is initialized."""
        if not self._listen_wanted:
            self._listen_wanted = True
            if self._initialized and not self._stopping:
                self._listening().open()

    def listen(self) -> None:
        """(Re)open the standalone GET stream, on the current session (if one is wanted)."""
        if self._listen_wanted and not self._stopping:
            self._listening().reopen()

    def _listening(self) -> StandaloneListener:
        if self._listener is None:
            self._listener = StandaloneListener(self, self._endpoint, self._expiry)
        return self._listener

    # ------------------------------------------------------------------ for StandaloneListener
    @property
    def label(self) -> str:
        return self._context.label

    def deliver(self, msg: Message) -> None:
        self._deliver(msg, None)

    async def get(self, cursor: Cursor, sink: Sink) -> int | None:
        return await self._get(cursor, sink, never)

    def lost(self, msg: Message, why: str, data: Any = None) -> None:
        """A message the server will not get or answer: a request gets an error."""
        if msg.kind is Kind.REQUEST:
            self._inflight.fail(msg.id, why, data)
        else:
            log.warning(
                "upstream_message_dropped",
                session=self._context.label,
                method=msg.method,
                error=why,
            )

    async def _guarded(self, coro: Coroutine[Any, Any, Any], what: str, msg: Message | None) -> Any:
        try:
            return await coro
        except Exception as exc:  # a bug: log it, answer its request, never crash the proxy
            log.exception("upstream_task_failed", session=self._context.label, task=what)
            if msg is not None:
                self.lost(msg, f"proxy error talking to the upstream: {type(exc).__name__}")
            return None

    # ------------------------------------------------------------------ sending
    async def _write(self) -> None:
        """The one writer: a POST starts once the previous one's body is written. It ends
        when the outbox is empty (``send`` starts another)."""
        try:
            while self._outbox:
                await self._write_one(*self._outbox.popleft())
        finally:
            self._writer = None
            if not self._outbox:
                self._outbox = None

    async def _write_one(self, payload: bytes, handshake: HandshakeStep | None) -> None:
        await self._expiry.reinitialized()  # later messages go to the new session
        try:
            msg = jsonrpc.classify(jsonrpc.decode(payload))
        except ProxyError:  # the core only sends what it parsed: never expected
            self.pending_bytes -= len(payload)
            return
        self._inflight.sent(payload)
        if handshake is HandshakeStep.INITIALIZE:
            self._expiry.client_initialize(msg, payload)
        elif msg.method == "notifications/cancelled":
            # Nobody waits for that answer any more: its stream may end without one.
            cancelled = msg.params.get("requestId")
            if isinstance(cancelled, int | str):
                self._inflight.ids.pop(cancelled, None)
        written = asyncio.Event()
        post = self.spawn(self.post(payload, msg, written), f"post-{msg.id}", msg)
        post.add_done_callback(setter(written))  # whatever becomes of the POST
        await written.wait()
        self.pending_bytes -= len(payload)

    async def post(
        self, payload: bytes, msg: Message, written: asyncio.Event | None, renewed: bool = False
    ) -> None:
        """POST one message and read its answer (§Sending Messages to the Server);
        ``renewed``: a retry with a token renewed after a 401."""
        if self._expiry.closed is not None:
            self.lost(msg, self._expiry.closed)
            return
        try:
            await self._endpoint.authorize()
        except ProxyError as exc:
            self._unauthorized(msg, exc)
            return
        # A new session (the client's initialize): neither its id nor its revision yet.
        initialize = msg.kind is Kind.REQUEST and msg.id == self._expiry.initialize_id
        headers = self._endpoint.headers(POST_ACCEPT, new_session=initialize)
        tracing.http_headers(msg, headers)  # W3C Trace Context, as params._meta has it
        used, bearer = headers.get(SESSION_HEADER), self._endpoint.bearer
        try:
            resp = await self._endpoint.post(payload, headers, written)
        except NETWORK_ERRORS as exc:
            self._expiry.unreachable(why_failed(exc))
            self.lost(msg, f"upstream unreachable: {why_failed(exc)}")
            return
        finally:
            if written is not None:
                written.set()
        try:
            if resp.status == 404 and used is not None:
                await self._expiry.expired(msg, payload, used)
            elif resp.status >= 500:
                self._expiry.unreachable(f"HTTP {resp.status}")
                self.lost(msg, f"upstream failed: HTTP {resp.status}")
            elif resp.status >= 400:
                self._expiry.reachable()
                if resp.status != 401 and await self._refused(resp, msg):
                    return  # the server's own error for it
                if resp.status in (401, 403):
                    await self._auth_refused(resp, msg, payload, bearer, renewed)
                else:
                    self.lost(msg, f"upstream refused the message: HTTP {resp.status}")
            else:
                self._expiry.reachable()
                self._expiry.accepted(msg)
                if initialize:
                    self._endpoint.adopt_session(resp.headers.get(SESSION_HEADER))
                await self._accepted_post(resp, msg)
        finally:
            resp.close()

    async def _accepted_post(self, resp: aiohttp.ClientResponse, msg: Message) -> None:
        """2xx: a request's answer is JSON or an SSE stream; anything else gets 202."""
        if msg.kind is not Kind.REQUEST:
            if msg.method == "notifications/initialized":
                self._initialized = True
                if self._listen_wanted and not self._stopping:
                    self._listening().open()
            return
        rid = msg.id
        if resp.content_type == SSE:
            await self._follow(resp, rid)
            return
        try:
            if resp.content_type != "application/json":
                raise BadBody(f"unexpected Content-Type {resp.content_type!r}")
            for answer in await self._endpoint.json(resp):
                self._deliver(answer, rid)
        except (BadBody, ProxyError, *NETWORK_ERRORS) as exc:
            health = self._context.health
            health.failing(f"upstream {self.describe()}: bad response ({why_failed(exc)})")
            self._inflight.fail(rid, f"upstream sent a bad response: {why_failed(exc)}")
            return
        self._inflight.fail(rid, "upstream response did not answer the request")

    async def _refused(self, resp: aiohttp.ClientResponse, msg: Message) -> bool:
        """4xx: deliver the server's own JSON-RPC error if it sent one for ``msg``
        (True), else nothing (False: the caller writes one)."""
        with contextlib.suppress(BadBody, ProxyError, *NETWORK_ERRORS):
            for answer in await self._endpoint.json(resp):
                if answer.kind is Kind.RESPONSE and msg.id is not None and answer.id == msg.id:
                    self._deliver(answer, msg.id)
                    return True
        return False

    async def _auth_refused(
        self,
        resp: aiohttp.ClientResponse,
        msg: Message,
        payload: bytes,
        bearer: str | None,
        renewed: bool,
    ) -> None:
        """401/403: once, a renewed token and the message again (a 401 to a token not
        renewed for it yet); else the error that says what to do."""
        server, credentials = self._context.server, self._endpoint.credentials
        challenge = resp.headers.get("WWW-Authenticate")
        why = refusal(server, credentials, resp.status, challenge, renewed)
        if why is not None:
            self._unauthorized(msg, why)
            return
        resp.close()
        try:
            await self._endpoint.authorize(stale=bearer)
        except ProxyError as exc:
            self._unauthorized(msg, exc)
            return
        await self.post(payload, msg, None, renewed=True)

    def _unauthorized(self, msg: Message, exc: ProxyError) -> None:
        """The server refuses the proxy (401/403) and no token cures it, or none can be
        had: the request gets the error that says what to do (docs/errors.md
        ``upstream_unauthorized``), and ``/readyz`` turns not ready with it."""
        data = exc.data if exc.data is not None else {"reason": exc.reason or "upstream_error"}
        if isinstance(exc, UpstreamUnauthorized):
            self._context.health.failing(exc.message)
        log.warning("upstream_unauthorized", session=self._context.label, error=exc.message)
        self.lost(msg, exc.message, data)

    async def _follow(self, resp: aiohttp.ClientResponse, rid: Any) -> None:
        """Read a request's SSE answer; resume it (§Resumability) if it drops too early."""
        cursor, why = Cursor(), "stream ended before the answer"

        def answered() -> bool:
            return rid not in self._inflight.ids

        def sink(msg: Message) -> None:
            self._deliver(msg, rid)

        try:
            await self._endpoint.sse(resp, cursor, sink, answered)
        except NETWORK_ERRORS as exc:
            why = why_failed(exc)
        resp.close()
        if answered():
            return
        if cursor.last_id is None:
            self._inflight.fail(rid, f"upstream connection lost before the answer ({why})")
            return
        log.info("upstream_stream_resuming", session=self._context.label, request=rid, error=why)
        loop, backoff = asyncio.get_running_loop(), Backoff()
        limit = self._context.config.reconnect_max_seconds
        deadline = loop.time() + limit
        while not answered():
            delay = cursor.retry_ms / 1000 if cursor.retry_ms is not None else backoff.next_delay()
            if loop.time() + delay > deadline:
                self._inflight.fail(
                    rid, f"upstream stream lost, not resumed in {limit:g} s ({why})"
                )
                return
            await asyncio.sleep(delay)
            try:
                refused = await self._get(cursor, sink, answered)
            except NETWORK_ERRORS as exc:
                why = why_failed(exc)
                self._expiry.unreachable(why)
                continue
            if refused == 404 and self._endpoint.session_id is not None:
                self._expiry.end(EXPIRED, "the MCP server ended the session during a request")
                return
            if refused is not None:
                self._inflight.fail(rid, f"upstream refused to resume: HTTP {refused}")
                return
            if cursor.progressed:
                deadline = loop.time() + limit
                backoff.reset()

    async def _get(self, cursor: Cursor, sink: Sink, done: Callable[[], bool]) -> int | None:
        """One ``GET`` SSE stream read to its end; the status if refused (5xx raises)."""
        with contextlib.suppress(ProxyError):  # else the server refuses it: a status
            await self._endpoint.authorize()
        resp = await self._endpoint.get(cursor.last_id)
        try:
            if resp.status >= 500:
                raise aiohttp.ClientResponseError(resp.request_info, (), status=resp.status)
            if resp.status != 200 or resp.content_type != SSE:
                return resp.status
            self._expiry.reachable()
            with contextlib.suppress(*NETWORK_ERRORS):
                await self._endpoint.sse(resp, cursor, sink, done)
            return None
        finally:
            resp.close()

    # ------------------------------------------------------------------ delivery
    def _deliver(self, msg: Message, origin: Any) -> None:
        if self._stopping:
            return
        if msg.kind is Kind.RESPONSE:
            if msg.id not in self._inflight.ids:  # a repeat, or never asked: exactly once
                log.info("upstream_response_dropped", session=self._context.label, id=msg.id)
                return
            result = msg.raw.get("result")
            if msg.id == self._expiry.initialize_id and isinstance(result, dict):
                self._endpoint.negotiated(result)
            self._inflight.answered(msg)
            self._expiry.settled(msg.id)
        self._context.on_message(msg, origin)

    def _deliver_error(self, msg: Message, origin: int | None) -> None:
        self._expiry.settled(msg.id)
        if not self._stopping:
            self._context.on_message(msg, origin)
