"""MCP over WebSocket for clients, at ``/ws`` (DESIGN.md "D2 over WebSocket"; issue 5).

The sessions, logs and limits of Streamable HTTP (:mod:`proxy.downstream.http`); only
the framing differs. This module accepts or refuses the upgrade; each socket is then
served by :class:`proxy.downstream.ws_socket.ClientSocket`.

- **Upgrade.** ``GET /ws``, subprotocol ``mcp`` (chosen when offered; a client offering
  none is served too). ``Host`` / ``Origin`` are checked as on ``/mcp`` before the upgrade
  (421 / 403, JSON-RPC body); a request that is no upgrade gets 426 ``upgrade_required``.
  Ping every ``sse.keepalive_seconds``; a peer that misses the pong is dropped.
- **Frames.** One JSON-RPC message per text frame; a JSON array is a batch only where a
  POST body may be one (2025-03-26). A refusal is an error frame with the code and
  ``data.reason`` of docs/errors.md (``id``: the refused request's, else null) and the
  socket stays open: binary frame → -32600 ``invalid_message``, not JSON → -32700
  ``parse_error``. A frame over ``sessions.max_message_bytes`` closes the socket with 1009
  (RFC 6455 §7.4.1): it cannot be parsed in part, and reading it whole is what the limit
  forbids.
- **Sessions.** ``initialize`` on a socket without a session creates one; its result
  carries the id in ``result._meta["io.github.mcp-resume-proxy/sessionId"]`` (on this
  socket's copy only). A new socket continues a session given header ``Mcp-Session-Id``
  or query parameter ``mcp-session-id`` (browsers); the upgrade response then carries
  ``Mcp-Session-Id``. A session another replica holds (a shared store) is served through
  it (:mod:`proxy.downstream.ws_remote`). Unknown session: the socket is closed at once
  with 4404 "Session not found" (browsers see close codes, not handshake statuses); a
  store that cannot say who holds it, with 1013 (try again later). A
  session that ends while its socket is open closes it with 4404 once in-flight answers
  are out; proxy shutdown closes every socket with 1001.
- **Delivery.** Each client request gets a virtual connection (``ClientConn`` with
  ``framing="message"``) and one pump task: requests interleave, each keeps its order.
  The socket also carries the standalone stream; a session's newest socket takes it,
  on this replica or another (:mod:`proxy.standalone_seat`).
- **No server-side closes.** When the core ends a virtual connection with a reconnect
  hint (``sse.max_stream_seconds``, the slow-reader cut, ``overflow: block`` asking for an
  acknowledgement) the pump re-attaches at once from the last frame it wrote (as a
  ``GET`` would, or by re-sending the ``stream/resume`` it serves, so ``{}`` stays last):
  the stream goes on from the log. A frame written to the open socket counts as received.
- **Resumption is the seed protocol.** A closed socket only detaches; nothing upstream is
  cancelled. A ``capabilities.streams`` client reconnects with its session id and sends
  ``stream/resume``. Exactly once needs its position: with ``streams.event_id_in_meta``
  each message of an announced stream carries its event id in
  ``_meta["io.github.mcp-resume-proxy/eventId"]``, and ``lastEventId`` names the last one
  received; without it, a resume replays all not acknowledged (it may repeat, never skip).
"""

from __future__ import annotations

import asyncio

import structlog
from aiohttp import WSCloseCode, web

from proxy.core import httprules
from proxy.core.errors import (
    BadRequest,
    MethodNotAllowed,
    ProxyError,
    SessionNotFound,
    StoreUnavailable,
)
from proxy.core.protocol import SESSION_HEADER, VERSION_HEADER
from proxy.core.socket_route import CLOSE_TRY_AGAIN_LATER, SocketRoute, socket_route
from proxy.downstream.auth import limit_resumes, principal_of, scopes_of
from proxy.downstream.entry import endpoint_entry
from proxy.downstream.remote import RemoteSessions
from proxy.downstream.stored import StoredStreams
from proxy.downstream.wire import error_response
from proxy.downstream.ws_remote import RemoteSocket
from proxy.downstream.ws_socket import CLOSE_SESSION_NOT_FOUND, SESSION_META, ClientSocket
from proxy.registry import Registry
from proxy.runtime import SessionRunner
from proxy.servers import Server
from proxy.store.base import StoreError

__all__ = [
    "CLOSE_SESSION_NOT_FOUND",
    "SESSION_META",
    "SESSION_QUERY",
    "SUBPROTOCOL",
    "WS_PATH",
    "WebSocketEndpoint",
]

log = structlog.get_logger("proxy.ws")

WS_PATH = "/ws"
SUBPROTOCOL = "mcp"
SESSION_QUERY = "mcp-session-id"


class WebSocketEndpoint:
    """The ``/ws`` endpoint: refuses or upgrades, then serves each socket."""

    def __init__(self, server: Server, registry: Registry) -> None:
        self.server = server
        self.config = server.config
        self.registry = registry
        self.sockets: set[ClientSocket | RemoteSocket] = set()
        context = registry.context
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

    async def refuse(self, request: web.Request, exc: ProxyError) -> web.StreamResponse:
        """A refused upgrade: its HTTP status and JSON-RPC error (before any socket)."""
        log.info("ws_refused", status=exc.http_status, reason=exc.reason, error=exc.message)
        headers = {"Allow": "GET"} if isinstance(exc, MethodNotAllowed) else None
        if exc.http_status == 426:
            headers = {"Upgrade": "websocket", "Connection": "Upgrade"}
        return error_response(exc, headers)

    @endpoint_entry
    async def handle(self, request: web.Request) -> web.StreamResponse:
        ws: web.WebSocketResponse = web.WebSocketResponse(
            protocols=(SUBPROTOCOL,),
            heartbeat=self.config.sse.keepalive_seconds,
            max_msg_size=self.config.sessions.max_message_bytes,
            compress=False,
        )
        try:
            if request.method != "GET":
                raise MethodNotAllowed(f"Method Not Allowed: {request.method}")
            httprules.check_protocol_version(request.headers.get(VERSION_HEADER))
            if not ws.can_prepare(request).ok:
                raise BadRequest(
                    "Upgrade Required: /ws takes a WebSocket upgrade",
                    reason="upgrade_required",
                    http_status=426,
                )
            if request.headers.get(SESSION_HEADER) or request.query.get(SESSION_QUERY):
                limit_resumes(request)  # a socket reattaching to its session
        except ProxyError as exc:
            return await self.refuse(request, exc)
        session_id = request.headers.get(SESSION_HEADER) or request.query.get(SESSION_QUERY)
        runner: SessionRunner | None = None
        holder: str | None = None  # another replica holding the session
        answered = True  # whether the store could say who holds it
        if session_id:
            try:
                runner = self.registry.get(session_id, principal_of(request), self.server)
            except SessionNotFound:
                try:
                    holder = await self._holder(session_id)
                except (StoreError, StoreUnavailable) as exc:  # live or not, nobody can tell
                    log.warning("ws_holder_unknown", error=str(exc))
                    answered = False
        me = self.remote.replicas.owner if self.remote is not None else None
        route = socket_route(bool(session_id), runner is not None, holder, me, answered)
        if route in (SocketRoute.LOCAL, SocketRoute.REMOTE):
            ws.headers[SESSION_HEADER] = str(session_id)
        await ws.prepare(request)
        socket: ClientSocket | RemoteSocket
        match route:
            case SocketRoute.UNKNOWN:
                await ws.close(code=CLOSE_TRY_AGAIN_LATER, message=b"store unavailable")
                return ws
            case SocketRoute.NOT_FOUND:
                log.info("ws_session_not_found")
                await ws.close(code=CLOSE_SESSION_NOT_FOUND, message=b"Session not found")
                return ws
            case SocketRoute.REMOTE:
                assert self.remote is not None and session_id and holder is not None
                principal = principal_of(request)
                socket = RemoteSocket(ws, session_id, holder, self.remote, principal)
            case SocketRoute.NEW | SocketRoute.LOCAL:
                socket = ClientSocket(
                    ws,
                    runner,
                    config=self.config,
                    registry=self.registry,
                    server=self.server,
                    principal=principal_of(request),
                    stored=self.stored if self.stored.enabled else None,
                    scopes=scopes_of(request),
                )
        self.sockets.add(socket)
        try:
            await socket.serve()
        finally:
            self.sockets.discard(socket)
        return ws

    async def _holder(self, session_id: str) -> str | None:
        """The live replica holding ``session_id`` (None: none, or no replicas)."""
        if self.remote is None:
            return None
        try:
            return await self.remote.replicas.owner_of(session_id)
        except SessionNotFound:
            return None

    async def close_all(self, app: web.Application) -> None:
        """aiohttp ``on_shutdown``: close every open socket (1001 Going Away)."""
        going = [
            s.ws.close(code=WSCloseCode.GOING_AWAY, message=b"proxy shutting down")
            for s in self.sockets
        ]
        await asyncio.gather(*going, return_exceptions=True)
