"""A Streamable HTTP MCP server at a URL (DESIGN.md U2), revisions 2025-03-26 … 2025-11-25.

The proxy is the client here (2025-11-25 basic/transports §Streamable HTTP). Each message
is its own POST, sent in the order ``send`` was called (one writer; it waits only until a
POST's body is written, so a long answer never holds up the next message). Each open
response is read by its own task, and what it carries belongs to its request (DESIGN §5
rule 3): ``on_message(msg, origin=<request id>)``. The standalone GET stream carries the
rest (origin None). Every task, response and the ``aiohttp.ClientSession`` end in
:meth:`HttpUpstream.stop`.

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
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

import aiohttp
import structlog
from yarl import URL

from proxy.backoff import Backoff
from proxy.config import ConfigError, UpstreamConfig
from proxy.core import jsonrpc
from proxy.core.errors import ProxyError
from proxy.core.jsonrpc import Kind, Message
from proxy.upstream.base import InFlight, OnClosed, OnMessage, UpstreamHealth
from proxy.upstream.http_body import (
    EXPIRED,
    NETWORK_ERRORS,
    POST_ACCEPT,
    SESSION_HEADER,
    SSE,
    VERSION_HEADER,
    BadBody,
    Cursor,
    Sink,
    UpstreamConfigError,
    is_safe_header,
    read_json,
    read_sse,
    setter,
    why_failed,
)
from proxy.upstream.http_expiry import SessionExpiry

log = structlog.get_logger("proxy.upstream.http")

_DELETE_SECONDS = 2.0


class HttpUpstream(SessionExpiry):
    """One upstream MCP session over Streamable HTTP."""

    def __init__(
        self,
        config: UpstreamConfig,
        *,
        session_id: str,
        on_message: OnMessage,
        on_closed: OnClosed,
        health: UpstreamHealth | None = None,
    ) -> None:
        self._config = config
        self._url = URL(config.url or "")
        self._prefix = session_id[:8]  # a prefix: session ids are bearer secrets
        self._on_message = on_message
        self._on_closed = on_closed
        self._health = health or UpstreamHealth()
        self._inflight = InFlight(self._deliver_error, self._prefix)
        self._static: dict[str, str] = {}
        self._http: aiohttp.ClientSession | None = None
        self._outbox: asyncio.Queue[bytes] = asyncio.Queue()
        self._tasks: set[asyncio.Task[Any]] = set()
        self._listener: asyncio.Task[Any] | None = None
        self._reinit: asyncio.Task[Any] | None = None
        self._readable = asyncio.Event()  # cleared by pause(): readers stop consuming
        self._readable.set()
        self._session: str | None = None  # the Mcp-Session-Id the server gave
        self._version: str | None = None  # the negotiated protocol revision
        self._init: dict[str, Any] | None = None  # the client's initialize, for re-init
        self._init_id: Any = None
        self._accepted: set[Any] = set()  # requests whose POST the server took (2xx)
        self._unreachable_since: float | None = None
        self._reinits = 0
        self._reinit_streak = 0  # re-inits with no accepted POST since: a loop guard
        self._stopping = False
        self._closed: str | None = None  # why the upstream session is over for good
        self.pending_bytes = 0  # queued to POST, not yet written

    @property
    def pid(self) -> int | None:
        return None

    def describe(self) -> str:
        url = self._url.with_user(None).with_password(None).with_fragment(None)
        return str(url.with_query(None)) + ("?…" if url.query_string else "")

    async def start(self) -> None:
        """Prepare the client; nothing connects yet (the first POST is ``initialize``)."""
        try:
            self._static = self._config.resolved_headers()
        except ConfigError as exc:
            self._health.failing(str(exc))
            raise UpstreamConfigError(str(exc)) from None
        trace = aiohttp.TraceConfig()
        trace.on_request_chunk_sent.append(self._body_written)
        self._http = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=0),
            timeout=aiohttp.ClientTimeout(total=None, connect=self._config.connect_timeout_seconds),
            trace_configs=[trace],
        )
        self._spawn(self._write(), "writer")

    def send(self, payload: bytes) -> None:
        """Queue one message; POSTs leave in this order."""
        if not self._stopping:
            self.pending_bytes += len(payload)
            self._outbox.put_nowait(payload)

    def pause(self) -> None:
        """Stop reading response bodies: TCP backpressure then holds the server back."""
        self._readable.clear()

    def resume(self) -> None:
        self._readable.set()

    async def stop(self) -> None:
        """Cancel every task, say goodbye (``DELETE``, §Session Management 5), close."""
        self._stopping = True
        while self._tasks:  # a task being cancelled may have spawned another
            tasks = list(self._tasks)
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
        http, self._http = self._http, None
        if http is None:
            return
        if self._session is not None:
            with contextlib.suppress(*NETWORK_ERRORS):
                timeout = aiohttp.ClientTimeout(total=_DELETE_SECONDS)
                async with http.delete(self._url, headers=self._headers(), timeout=timeout) as r:
                    log.info("upstream_session_deleted", session=self._prefix, status=r.status)
        await http.close()
        log.info("upstream_stopped", session=self._prefix)

    # ------------------------------------------------------------------ plumbing
    def _spawn(
        self, coro: Coroutine[Any, Any, Any], what: str, msg: Message | None = None
    ) -> asyncio.Task[Any]:
        name = f"http-{what}-{self._prefix}"
        task = asyncio.create_task(self._guarded(coro, what, msg), name=name)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    async def _guarded(self, coro: Coroutine[Any, Any, Any], what: str, msg: Message | None) -> Any:
        try:
            return await coro
        except Exception as exc:  # a bug: log it, answer its request, never crash the proxy
            log.exception("upstream_task_failed", session=self._prefix, task=what)
            if msg is not None:
                self._lost(msg, f"proxy error talking to the upstream: {type(exc).__name__}")
            return None

    def _headers(
        self, accept: str | None = None, last_event_id: str | None = None
    ) -> dict[str, str]:
        headers = dict(self._static)
        if accept is not None:
            headers["Accept"] = accept
        if accept == POST_ACCEPT:
            headers["Content-Type"] = "application/json"
        if self._session is not None:
            headers[SESSION_HEADER] = self._session
        if self._version is not None:
            headers[VERSION_HEADER] = self._version
        if last_event_id is not None:
            headers["Last-Event-ID"] = last_event_id
        return headers

    @staticmethod
    async def _body_written(_: Any, ctx: Any, __: Any) -> None:
        if isinstance(event := ctx.trace_request_ctx, asyncio.Event):
            event.set()

    # ------------------------------------------------------------------ sending
    async def _write(self) -> None:
        """The one writer: a POST starts once the previous one's body is written."""
        while True:
            payload = await self._outbox.get()
            if self._reinit is not None:
                await asyncio.shield(self._reinit)  # later messages go to the new session
            try:
                msg = jsonrpc.classify(jsonrpc.decode(payload))
            except ProxyError:  # the core only sends what it parsed: never expected
                self.pending_bytes -= len(payload)
                continue
            self._inflight.sent(payload)
            if msg.method == "initialize" and msg.kind is Kind.REQUEST:
                self._init, self._init_id = msg.raw, msg.id
            elif msg.method == "notifications/cancelled":
                # Nobody waits for that answer any more: its stream may end without one.
                cancelled = msg.params.get("requestId")
                if isinstance(cancelled, int | str):
                    self._inflight.ids.pop(cancelled, None)
            written = asyncio.Event()
            post = self._spawn(self._post(payload, msg, written), f"post-{msg.id}", msg)
            post.add_done_callback(setter(written))  # whatever becomes of the POST
            await written.wait()
            self.pending_bytes -= len(payload)

    async def _post(self, payload: bytes, msg: Message, written: asyncio.Event | None) -> None:
        """POST one message and read its answer (§Sending Messages to the Server)."""
        assert self._http is not None
        if self._closed is not None:
            self._lost(msg, self._closed)
            return
        initialize = msg.kind is Kind.REQUEST and msg.id == self._init_id
        headers = self._headers(POST_ACCEPT)
        if initialize:  # a new session: neither its id nor its revision yet
            headers.pop(SESSION_HEADER, None)
            headers.pop(VERSION_HEADER, None)
        used = headers.get(SESSION_HEADER)
        try:
            resp = await self._http.post(
                self._url, data=payload, headers=headers, trace_request_ctx=written
            )
        except NETWORK_ERRORS as exc:
            self._failure(why_failed(exc))
            self._lost(msg, f"upstream unreachable: {why_failed(exc)}")
            return
        finally:
            if written is not None:
                written.set()
        try:
            if resp.status == 404 and used is not None:
                await self._expired(msg, payload, used)
            elif resp.status >= 500:
                self._failure(f"HTTP {resp.status}")
                self._lost(msg, f"upstream failed: HTTP {resp.status}")
            elif resp.status >= 400:
                self._reachable()
                await self._refused(resp, msg)
            else:
                self._reachable()
                self._reinit_streak = 0
                if initialize:
                    self._adopt_session(resp.headers.get(SESSION_HEADER))
                await self._accepted_post(resp, msg)
        finally:
            resp.close()

    async def _accepted_post(self, resp: aiohttp.ClientResponse, msg: Message) -> None:
        """2xx: a request's answer is JSON or an SSE stream; anything else gets 202."""
        if msg.kind is not Kind.REQUEST:
            if msg.method == "notifications/initialized" and self._listener is None:
                self._listener = self._spawn(self._listen(), "listen")
            return
        rid = msg.id
        self._accepted.add(rid)
        if resp.content_type == SSE:
            await self._follow(resp, rid)
            return
        try:
            if resp.content_type != "application/json":
                raise BadBody(f"unexpected Content-Type {resp.content_type!r}")
            for answer in await read_json(self._reader(resp), self._config.max_line_bytes):
                self._deliver(answer, rid)
        except (BadBody, ProxyError, *NETWORK_ERRORS) as exc:
            self._health.failing(f"upstream {self.describe()}: bad response ({why_failed(exc)})")
            self._inflight.fail(rid, f"upstream sent a bad response: {why_failed(exc)}")
            return
        self._inflight.fail(rid, "upstream response did not answer the request")

    async def _refused(self, resp: aiohttp.ClientResponse, msg: Message) -> None:
        """4xx: the server's own JSON-RPC error if it sent one for us, else ours."""
        with contextlib.suppress(BadBody, ProxyError, *NETWORK_ERRORS):
            for answer in await read_json(self._reader(resp), self._config.max_line_bytes):
                if answer.kind is Kind.RESPONSE and msg.id is not None and answer.id == msg.id:
                    self._deliver(answer, msg.id)
        self._lost(msg, f"upstream refused the message: HTTP {resp.status}")

    def _adopt_session(self, session: str | None) -> None:
        # §Session Management 1: visible ASCII only; anything else cannot be sent back.
        if session and is_safe_header(session) and " " not in session:
            self._session = session
        elif session:
            log.warning("upstream_bad_session_id", session=self._prefix)

    def _lost(self, msg: Message, why: str) -> None:
        """A message the server will not get or answer: a request gets an error."""
        if msg.kind is Kind.REQUEST:
            self._inflight.fail(msg.id, why)
        else:
            log.warning(
                "upstream_message_dropped", session=self._prefix, method=msg.method, error=why
            )

    # ------------------------------------------------------------------ reading
    def _reader(self, resp: aiohttp.ClientResponse) -> Callable[[], Awaitable[bytes]]:
        return lambda: self._chunk(resp)

    async def _sse(
        self, resp: aiohttp.ClientResponse, cursor: Cursor, sink: Sink, done: Callable[[], bool]
    ) -> None:
        limit = self._config.max_line_bytes
        await read_sse(self._reader(resp), limit, self._prefix, cursor, sink, done)

    async def _chunk(self, resp: aiohttp.ClientResponse) -> bytes:
        """The next bytes of a body (b"" at its end); waits while paused."""
        await self._readable.wait()
        return await resp.content.readany()

    async def _follow(self, resp: aiohttp.ClientResponse, rid: Any) -> None:
        """Read a request's SSE answer; resume it (§Resumability) if it drops too early."""
        cursor, why = Cursor(), "stream ended before the answer"

        def answered() -> bool:
            return rid not in self._inflight.ids

        def sink(msg: Message) -> None:
            self._deliver(msg, rid)

        try:
            await read_sse(
                self._reader(resp),
                self._config.max_line_bytes,
                self._prefix,
                cursor,
                sink,
                answered,
            )
        except NETWORK_ERRORS as exc:
            why = why_failed(exc)
        resp.close()
        if answered():
            return
        if cursor.last_id is None:
            self._inflight.fail(rid, f"upstream connection lost before the answer ({why})")
            return
        log.info("upstream_stream_resuming", session=self._prefix, request=rid, error=why)
        loop, backoff = asyncio.get_running_loop(), Backoff()
        limit = self._config.reconnect_max_seconds
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
                self._failure(why)
                continue
            if refused == 404 and self._session is not None:
                self._end(EXPIRED, "the MCP server ended the session during a request")
                return
            if refused is not None:
                self._inflight.fail(rid, f"upstream refused to resume: HTTP {refused}")
                return
            if cursor.progressed:
                deadline = loop.time() + limit
                backoff.reset()

    async def _get(self, cursor: Cursor, sink: Sink, done: Callable[[], bool]) -> int | None:
        """One ``GET`` SSE stream read to its end; the status if refused (5xx raises)."""
        assert self._http is not None
        resp = await self._http.get(self._url, headers=self._headers(SSE, cursor.last_id))
        try:
            if resp.status >= 500:
                raise aiohttp.ClientResponseError(resp.request_info, (), status=resp.status)
            if resp.status != 200 or resp.content_type != SSE:
                return resp.status
            self._reachable()
            with contextlib.suppress(*NETWORK_ERRORS):
                await read_sse(
                    self._reader(resp),
                    self._config.max_line_bytes,
                    self._prefix,
                    cursor,
                    sink,
                    done,
                )
            return None
        finally:
            resp.close()

    async def _listen(self) -> None:
        """The standalone GET stream (§Listening for Messages from the Server)."""
        cursor, backoff = Cursor(), Backoff()

        def sink(msg: Message) -> None:
            self._deliver(msg, None)

        while self._closed is None:
            try:
                refused = await self._get(cursor, sink, lambda: False)
            except NETWORK_ERRORS as exc:
                self._failure(why_failed(exc))
                await asyncio.sleep(backoff.next_delay())
                continue
            if refused is not None:  # 405: the server has none; 404: a POST will find out
                log.info("upstream_no_standalone_stream", session=self._prefix, status=refused)
                return
            if cursor.progressed:
                backoff.reset()
            delay = cursor.retry_ms / 1000 if cursor.retry_ms is not None else backoff.next_delay()
            await asyncio.sleep(delay)

    # ------------------------------------------------------------------ delivery
    def _deliver(self, msg: Message, origin: Any) -> None:
        if self._stopping:
            return
        if msg.kind is Kind.RESPONSE:
            if msg.id not in self._inflight.ids:  # a repeat, or never asked: exactly once
                log.info("upstream_response_dropped", session=self._prefix, id=msg.id)
                return
            result = msg.raw.get("result")
            if msg.id == self._init_id and isinstance(result, dict):
                version = result.get("protocolVersion")
                self._version = version if isinstance(version, str) else None
            self._inflight.answered(msg)
            self._accepted.discard(msg.id)
        self._on_message(msg, origin)

    def _deliver_error(self, msg: Message, origin: int | None) -> None:
        self._accepted.discard(msg.id)
        if not self._stopping:
            self._on_message(msg, origin)
