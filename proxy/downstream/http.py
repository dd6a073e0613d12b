"""Streamable HTTP for clients (revisions 2025-03-26, 2025-06-18, 2025-11-25), on aiohttp.

This layer reads requests, applies the header rules of :mod:`proxy.core.httprules`, feeds
the session and writes out what the session queued for the connection. Errors become wire
form here and only here (:func:`proxy.downstream.wire.error_response`). The application
that serves this endpoint beside ``/ws`` and ``/healthz`` is :mod:`proxy.downstream.app`.
"""

from __future__ import annotations

import contextlib
import operator
import time
from typing import TYPE_CHECKING

import structlog
from aiohttp import web

from proxy import tracing
from proxy.config import Config
from proxy.context import ProxyContext
from proxy.core import cors, httprules, jsonrpc, lone_answer, seed
from proxy.core.admission import admit_post
from proxy.core.dual_era import discover_refused
from proxy.core.era import (
    LEGACY_VERSIONS,
    UNSUPPORTED_VERSION,
    ModernError,
    is_modern,
)
from proxy.core.errors import (
    BadRequest,
    MethodNotAllowed,
    PayloadTooLarge,
    ProxyError,
    RequestTimeout,
    ResumeError,
)
from proxy.core.events import ClientGet
from proxy.core.jsonrpc import Kind, Message
from proxy.core.protocol import LAST_EVENT_ID, SESSION_HEADER, VERSION_HEADER
from proxy.downstream.admission import check_session_reading, post_to_session
from proxy.downstream.auth import limit_resumes, principal_of, scopes_of
from proxy.downstream.conn_response import ConnResponder
from proxy.downstream.entry import endpoint_entry
from proxy.downstream.guard import BodyBudget, read_body
from proxy.downstream.handoff import take_handoff
from proxy.downstream.remote import RemoteSessions
from proxy.downstream.stored import StoredStreams
from proxy.downstream.wire import error_response
from proxy.metrics import method_label
from proxy.modern.endpoint import ModernFacade
from proxy.modern.reply import Reply
from proxy.registry import Registry
from proxy.runtime import ClientConn, SessionRunner
from proxy.servers import Server

log = structlog.get_logger("proxy.http")

_METHODS = "GET, POST, DELETE"


def _preflight(request: web.Request) -> web.Response:
    """A CORS preflight's answer: every MCP request header allowed (proxy/core/cors.py)."""
    requested = request.headers.get("Access-Control-Request-Headers")
    headers = {
        "Access-Control-Allow-Methods": _METHODS,
        "Access-Control-Allow-Headers": cors.allowed_request_headers(requested),
        "Access-Control-Max-Age": "600",
    }
    if requested:  # the answer depends on it: a cache must not reuse it for another
        headers["Vary"] = "Access-Control-Request-Headers"
    return web.Response(status=204, headers=headers)


# What counts as a resume or poll (auth.per_principal.resumes_per_minute), in both eras;
# a GET with Last-Event-ID is counted by _get, a WebSocket reattaching by /ws.
_POLLS = frozenset({seed.POLL, seed.RESUME, "tasks/get", "tasks/result"})

# Set on a request the modern side served.
_MODERN_KEY: web.RequestKey[bool] = web.RequestKey("mcp_resume_proxy.modern")


def _legacy_only(version: str | None, why: str) -> ModernError:
    """``-32022`` listing only the legacy revisions: a dual-era client falls back to
    ``initialize`` on it (proxy/core/dual_era.py)."""
    requested = version or "2026-07-28"
    return ModernError(
        UNSUPPORTED_VERSION,
        f"Unsupported protocol version: {requested} ({why})",
        data={"supported": list(LEGACY_VERSIONS), "requested": requested},
    )


class StreamableHttp:
    """The ``/mcp`` endpoint."""

    def __init__(
        self,
        server: Server,
        context: ProxyContext,
        registry: Registry,
        modern: ModernFacade | None = None,
        bodies: BodyBudget | None = None,
    ) -> None:
        """``modern`` is the server's 2026-07-28 side, built by the app's root when
        ``modern.enabled``; without one, modern requests are answered as legacy ones."""
        self.server = server
        config = server.config
        self.responder = ConnResponder(config, context.metrics)
        self.config = config
        self.context = context
        self.registry = registry
        self.metrics = context.metrics
        # POST bodies being read: one budget for every server's endpoint (the app's).
        self.bodies = bodies or BodyBudget(config.listen.max_inflight_body_bytes)
        # Both read the server's config as it is at each request (a reload replaces it).
        self.stored = StoredStreams(
            context.store,
            context.settings.token_secret,
            server,
            sole_server=len(context.servers) == 1,
            tails=context.tails,
        )
        self.remote = (
            RemoteSessions(context.replicas, self.stored, server)
            if context.replicas is not None
            else None
        )
        self.modern = modern

    def _retarget(self, config: Config) -> None:
        """A reload's new config: the next request, and the next response, follow it."""
        self._config = config
        self.responder.retarget(config)

    if TYPE_CHECKING:
        config: Config
    else:  # read several times per request: a C getter (attrgetter), not a Python one
        config = property(operator.attrgetter("_config"), _retarget)

    # ------------------------------------------------------------------ entry
    @endpoint_entry
    async def handle(self, request: web.Request) -> web.StreamResponse:
        try:
            if request.method == "POST":
                return await self._post(request)
            if request.method in ("GET", "DELETE") and self._modern_client(request):
                # 2026-07-28 has no GET stream and no session to delete.
                raise MethodNotAllowed(f"Method Not Allowed: {request.method} (2026-07-28)")
            if request.method == "GET":
                principal = principal_of(request)
                return await tracing.client_resume(
                    self._get(request), request.headers, self.server.name, principal
                )
            if request.method == "DELETE":
                return await self._delete(request)
            if request.method == "OPTIONS" and request.headers.get("Origin"):
                return _preflight(request)  # CORS preflight
            raise MethodNotAllowed(f"Method Not Allowed: {request.method}")
        except ProxyError as exc:
            return await self.refuse(request, exc)

    async def refuse(self, request: web.Request, exc: ProxyError) -> web.StreamResponse:
        """A refused request's answer: its status and JSON-RPC error (logged, counted)."""
        if isinstance(exc, ResumeError):
            self.metrics.resumes.labels(exc.reason or "refused").inc()
        log.info(
            "request_refused",
            method=request.method,
            status=exc.http_status,
            reason=exc.reason,
            error=exc.message,
        )
        if isinstance(exc, RequestTimeout):
            return await self._answer_and_close(request, exc)
        headers = {"Allow": _METHODS} if isinstance(exc, MethodNotAllowed) else None
        return error_response(exc, headers)

    @staticmethod
    async def _answer_and_close(request: web.Request, exc: ProxyError) -> web.StreamResponse:
        """Answer, then close at once: the rest of a stalled body is not worth aiohttp's
        lingering read (up to 10 s) before the connection is freed."""
        response = error_response(exc)
        response.force_close()
        with contextlib.suppress(ConnectionError):
            await response.prepare(request)
            await response.write_eof()
        request.protocol.force_close()
        return response

    @staticmethod
    def _modern_client(request: web.Request) -> bool:
        """A request without a session whose protocol version is not a legacy one."""
        version = request.headers.get(VERSION_HEADER)
        return (
            version is not None
            and not request.headers.get(SESSION_HEADER)
            and version.strip() not in LEGACY_VERSIONS
        )

    @staticmethod
    def _session_id(request: web.Request) -> str:
        session_id = request.headers.get(SESSION_HEADER)
        if not session_id:
            raise BadRequest("Bad Request: missing Mcp-Session-Id header", reason="missing_session")
        return session_id

    def _session(self, request: web.Request) -> SessionRunner:
        return self.registry.get(self._session_id(request), principal_of(request), self.server)

    def _remote(self, request: web.Request) -> RemoteSessions | None:
        """Replicas: the way to a session this process does not hold (else None)."""
        if self.remote is None or self._session_id(request) in self.registry:
            return None
        return self.remote

    def _named_session(self, request: web.Request) -> SessionRunner | RemoteSessions:
        """The session the request names: held here, or (replicas) the way to the replica
        that holds it; then its protocol version checked (2025-06-18 transports §Protocol
        Version Header), so a refusal for either reason comes in the same order."""
        remote = self._remote(request)
        target = remote if remote is not None else self._session(request)
        httprules.check_protocol_version(request.headers.get(VERSION_HEADER))
        return target

    # ------------------------------------------------------------------ POST
    async def _post(self, request: web.Request) -> web.StreamResponse:
        handoff = take_handoff(request)
        if handoff is not None:  # begun beside aiohttp (fast_post.py), finished here
            response = await handoff.finish(request)
            elapsed = time.monotonic() - handoff.started
            self.metrics.request_seconds(handoff.method, "legacy").observe(elapsed)
            return response
        headers = request.headers
        httprules.check_post_accept(headers.get("Accept"))
        httprules.check_content_type(headers.get("Content-Type"))
        limit = self.config.sessions.max_message_bytes
        length = request.content_length  # (parsed from its header on each read)
        if length is not None and length > limit:
            raise PayloadTooLarge(f"Payload Too Large: body over {limit} bytes")
        body = await read_body(
            request, self.bodies, max_bytes=limit, timeout=self.config.listen.body_timeout_seconds
        )
        messages, batch = jsonrpc.parse_body(body)
        for msg in messages:
            if msg.method in _POLLS:
                limit_resumes(request)
        started = time.monotonic()
        method = method_label(None if batch else messages[0].method)
        request[_MODERN_KEY] = False  # True once the modern side serves it
        try:
            response = await tracing.client_post(  # its span, when tracing is on
                self._post_messages(request, messages, batch),
                headers,
                messages,
                self.server.name,
                principal_of(request),
            )
            era = "modern" if request[_MODERN_KEY] else "legacy"
            self.metrics.request_seconds(method, era).observe(time.monotonic() - started)
            return response
        except ProxyError as exc:
            # Answer a lone request's refusal with its id (JSON-RPC 2.0 §5).
            if exc.request_id is None and not batch and messages[0].kind is Kind.REQUEST:
                exc.request_id = messages[0].id
            raise

    async def _post_messages(
        self, request: web.Request, messages: list[Message], batch: bool
    ) -> web.StreamResponse:
        headers = request.headers
        version = headers.get(VERSION_HEADER)
        existing = headers.get(SESSION_HEADER)
        if any(is_modern(m.raw, version, existing) for m in messages):
            if batch:
                raise BadRequest("Bad Request: a 2026-07-28 POST carries one message, not a batch")
            if self.modern is None:  # a dual-era client falls back to initialize on this
                raise _legacy_only(version, "modern.enabled is false")
            if discover_refused(messages[0].raw, self.server.dual_era, self.config.tasks.enabled):
                raise _legacy_only(version, "dual_era is legacy: use initialize")
            request[_MODERN_KEY] = True
            reply = Reply(request, self.config.sse.keepalive_seconds)
            return await self.modern.post(
                messages[0], principal_of(request), request.headers, reply, scopes_of(request)
            )
        header_id = headers.get(LAST_EVENT_ID)
        admission = admit_post(
            messages,
            batch,
            initialized=bool(existing) and existing in self.registry,
            accepting=self.context.accepting,
            draining=self.context.draining,
            removed=self.server.removed,
        )
        if admission.opens_session:
            runner = await self.registry.create(
                principal_of(request), self.server, scopes_of(request)
            )
        else:
            target = self._named_session(request)
            if isinstance(target, RemoteSessions):
                served = await self._remote_legacy_task(request, target, messages, batch)
                if served is not None:
                    return served
                return await target.post(
                    request, self._session_id(request), messages, batch, header_id
                )
            runner = target
            if self.modern is not None and runner.session.offers_tasks:
                reply = Reply(request, self.config.sse.keepalive_seconds)
                served = await self.modern.legacy.post(runner, messages, batch, reply)
                if served is not None:
                    return served
            foreign = self.stored.enabled and self.stored.foreign(messages, runner.session.epoch)
            if foreign:
                return await self.stored.post(request, runner.session_id, foreign, header_id)
            check_session_reading(runner, self.config.upstream.max_pending_bytes)
        conn = await post_to_session(
            runner,
            messages,
            batch,
            framing="sse",
            opens_session=admission.opens_session,
            last_event_id=header_id,
        )
        tracing.note_with(
            lambda: {"session": runner.session_id, "stream": _stream_of(runner, conn)}
        )
        if conn is None:
            return web.Response(status=202, headers={SESSION_HEADER: runner.session_id})
        hold = (
            self.config.sse.json_answer_window_ms > 0
            and not batch
            and messages[0].kind is Kind.REQUEST
            and lone_answer.prefers_json(headers.get("Accept"))
        )
        return await self.responder.respond(request, runner, conn, hold=hold)

    async def _remote_legacy_task(
        self, request: web.Request, remote: RemoteSessions, messages: list[Message], batch: bool
    ) -> web.StreamResponse | None:
        """A 2025-11-25 task request for a session another replica holds, served here from
        the task's record (proxy/modern/legacy_remote.py); None: forward it."""
        if self.modern is None or not self.modern.legacy_remote.claims(messages, batch):
            return None
        session_id = self._session_id(request)
        await remote.replicas.owner_of(session_id)  # a session that ended: 404, as ever
        headers = {SESSION_HEADER: session_id}
        reply = Reply(request, self.config.sse.keepalive_seconds, headers)
        return await self.modern.legacy_remote.post(
            session_id, principal_of(request), messages, batch, reply
        )

    # ------------------------------------------------------------------ GET
    async def _get(self, request: web.Request) -> web.StreamResponse:
        httprules.check_get_accept(request.headers.get("Accept"))
        session_id = request.headers.get(SESSION_HEADER)
        last_event_id = request.headers.get(LAST_EVENT_ID)
        if last_event_id is not None:
            limit_resumes(request)
        if self.stored.enabled and session_id and last_event_id and session_id not in self.registry:
            httprules.check_protocol_version(request.headers.get(VERSION_HEADER))
            if self.remote is not None:
                await self.remote.acknowledge(session_id, last_event_id, principal_of(request))
            return await self.stored.get(request, session_id, last_event_id)
        target = self._named_session(request)
        if isinstance(target, RemoteSessions):
            return await target.get(request, self._session_id(request))
        runner = target
        if last_event_id is None and self.remote is not None:  # a listener elsewhere stops
            await runner.seat.clear_remote(self.remote.replicas)
        conn = runner.open_conn()
        try:
            runner.feed(ClientGet(conn.id, last_event_id))
        except ProxyError:
            runner.conn_gone(conn)
            raise
        if last_event_id is not None:  # (counted as resumed where the core says so)
            self.metrics.replay_events.observe(conn.replay_events)
            tracing.note(replayed=conn.replay_events)
            conn.replay_clock = time.monotonic()
        return await self.responder.respond(request, runner, conn)

    # ------------------------------------------------------------------ DELETE
    async def _delete(self, request: web.Request) -> web.StreamResponse:
        target = self._named_session(request)
        if isinstance(target, RemoteSessions):
            return await target.delete(request, self._session_id(request))
        await target.end("deleted by client")
        return web.Response(status=200)


def _stream_of(runner: SessionRunner, conn: ClientConn | None) -> int | None:
    return runner.session.stream_of(conn.id) if conn is not None else None
