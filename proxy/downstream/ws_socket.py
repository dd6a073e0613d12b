"""One client socket of ``/ws``: its virtual connections, their pumps, their re-attachment.

The protocol it serves is described in :mod:`proxy.downstream.websocket`, whose endpoint
accepts the upgrade and hands each socket to a :class:`ClientSocket`.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable
from dataclasses import dataclass, field
from typing import Any

import structlog
from aiohttp import WSCloseCode, WSMsgType, web

from proxy import tracing
from proxy.config import Config
from proxy.core import jsonrpc, seed
from proxy.core.admission import admit_post
from proxy.core.errors import (
    BadRequest,
    Conflict,
    InvalidMessage,
    ProxyError,
    ResumeError,
    SessionNotFound,
)
from proxy.core.eventid import format_event_id, parse_event_id
from proxy.core.events import ClientGet, ClientPost
from proxy.core.jsonrpc import Kind, Message
from proxy.downstream.admission import check_session_reading, post_to_session
from proxy.downstream.stored import StoredStreams
from proxy.downstream.ws_remote import LogFrames
from proxy.registry import Registry
from proxy.runtime import ClientConn, CloseMarker, ConnFenced, Frame, SessionRunner
from proxy.servers import Server
from proxy.store.base import StoreError

log = structlog.get_logger("proxy.ws")

SESSION_META = "io.github.mcp-resume-proxy/sessionId"
# How long a socket whose session was fenced waits for the store to say how its streams
# ended (the replica that ends them does so within a lease of noticing).
FENCED_TAIL_SECONDS = 10.0
CLOSE_SESSION_NOT_FOUND = 4404  # application close codes are 4000-4999 (RFC 6455 §7.4.2)
_CLOSE_WAIT_SECONDS = 10.0


def _open(runner: SessionRunner) -> ClientConn:
    return runner.open_conn(framing="message")


def _before(event_id: str) -> str:
    """The position just before the event ``event_id`` (to resume from)."""
    pos = parse_event_id(event_id)
    return format_event_id(pos.epoch, pos.stream, max(0, pos.seq - 1))


@dataclass(eq=False)
class _Virtual:
    """One virtual connection of a socket, across its re-attachments."""

    runner: SessionRunner
    conn: ClientConn
    request_ids: list[Any] = field(default_factory=list)
    resume: Message | None = None  # the stream/resume this connection serves
    init_id: Any = None  # the initialize request whose result gets the session id
    standalone: bool = False
    written: str | None = None  # event id of the last frame written on ``conn``
    attached_from: str | None = None  # the position ``conn`` was attached from

    def position(self) -> str | None:
        """Where the client is on this connection's streams: resume from here."""
        if self.written is not None:
            return self.written
        if self.conn.first_event_id is not None:
            return _before(self.conn.first_event_id)
        return self.conn.last_event_id or self.attached_from  # a priming id, or the last


class ClientSocket:
    """One client socket: its session (once known), its virtual connections, its tasks."""

    def __init__(
        self,
        ws: web.WebSocketResponse,
        runner: SessionRunner | None,
        *,
        config: Config,
        registry: Registry,
        server: Server,
        principal: str | None = None,
        stored: StoredStreams | None = None,
        scopes: frozenset[str] | None = None,
    ) -> None:
        self.config = config
        self.stored = stored  # a durable store: streams of other sessions, from the log
        self.server = server
        self.principal = principal  # sessions it opens are bound to it (inbound auth)
        self.scopes = scopes  # and to its credential's OAuth scopes (docs/tools.md)
        self.registry = registry
        self.ws = ws
        self.runner = runner
        self.log = log.bind(
            session=runner.session_id[:8] if runner else None,
            upstream=server.name,
            principal=principal,
        )
        self._send_lock = asyncio.Lock()
        self._pumps: set[asyncio.Task[None]] = set()  # one per request's virtual connection
        self._standalone: tuple[_Virtual, asyncio.Task[None]] | None = None
        self._closer: asyncio.Task[None] | None = None

    # ------------------------------------------------------------------ reading
    async def serve(self) -> None:
        self.log.info("ws_opened", protocol=self.ws.ws_protocol, resumed=self.runner is not None)
        try:
            if self.runner is not None:
                await self._attach_standalone()
            async for frame in self.ws:
                if frame.type is WSMsgType.TEXT:
                    await self._on_text(frame.data)
                elif frame.type is WSMsgType.BINARY:
                    await self._refuse(InvalidMessage("Invalid Request: use text frames"))
                elif frame.type is WSMsgType.ERROR:  # e.g. 1009: aiohttp closed it already
                    self.log.info("ws_error", error=repr(frame.data))
                    break
        except ConnectionError as exc:  # writing a refusal to a socket that went away
            self.log.debug("client_gone", error=repr(exc))
        finally:
            await self._teardown()

    async def _on_text(self, data: str) -> None:
        messages: list[Message] = []
        batch = False
        try:
            messages, batch = jsonrpc.parse_body(data.encode())
            admitted = self._client_messages(messages, batch)  # traced: its span, from _meta
            await tracing.client_post(admitted, {}, messages, self.server.name, self.principal)
        except ProxyError as exc:
            # Answer a lone request's refusal with its id (JSON-RPC 2.0 §5).
            lone = messages[0] if len(messages) == 1 and not batch else None
            if exc.request_id is None and lone is not None and lone.kind is Kind.REQUEST:
                exc.request_id = lone.id
            await self._refuse(exc)

    async def _refuse(self, exc: ProxyError) -> None:
        self.log.info(
            "ws_frame_refused", code=exc.jsonrpc_code, reason=exc.reason, error=exc.message
        )
        await self._send(jsonrpc.encode(exc.to_jsonrpc()))
        if isinstance(exc, SessionNotFound) and self.runner is not None:
            self._session_over()

    async def _client_messages(self, messages: list[Message], batch: bool) -> None:
        admission = admit_post(
            messages,
            batch,
            initialized=self.runner is not None,
            accepting=self.registry.context.accepting,
            draining=self.registry.context.draining,
            removed=self.server.removed,
        )
        init = admission.initialize
        if init is not None:
            runner = await self.registry.create(self.principal, self.server, self.scopes)
        else:
            if self.runner is None:
                raise BadRequest(
                    "Bad Request: no session on this socket: send initialize, or reconnect "
                    "with Mcp-Session-Id",
                    reason="missing_session",
                )
            runner = self.runner
            stored = self.stored
            foreign = StoredStreams.foreign(messages, runner.session.epoch) if stored else None
            if foreign is not None and stored is not None:  # another session's: from the log
                frames = LogFrames(stored, self._send, self.principal)
                task = asyncio.create_task(self._guarded(frames.seed_request(foreign)))
                self._pumps.add(task)
                task.add_done_callback(self._pumps.discard)
                return
            check_session_reading(runner, self.config.upstream.max_pending_bytes)
        conn = await post_to_session(
            runner, messages, batch, framing="message", opens_session=init is not None
        )
        if conn is None:  # notifications and responses only: nothing to answer
            return
        requests = [m for m in messages if m.kind is Kind.REQUEST]
        resume = requests[0] if requests[0].method == seed.RESUME else None
        v = _Virtual(runner, conn, [m.id for m in requests], resume=resume)
        if init is not None:
            v.init_id = init.id
            self.runner = runner
            self.log = log.bind(session=runner.session_id[:8])
            self.log.info("ws_session_created")
        task = asyncio.create_task(self._pump(v))
        self._pumps.add(task)
        task.add_done_callback(self._pumps.discard)
        if init is not None:
            await self._attach_standalone()

    # ------------------------------------------------------------------ standalone stream
    async def _attach_standalone(self) -> None:
        """Carry the session's standalone stream (server-initiated messages) here: the
        newest socket of a session takes it over, on this replica or another
        (:mod:`proxy.standalone_seat`)."""
        runner = self.runner
        assert runner is not None

        async def attach() -> tuple[int | None, None]:
            conn = _open(runner)
            try:
                runner.feed(ClientGet(conn.id))
            except Conflict:  # an HTTP client holds it (GET); it keeps it
                runner.conn_gone(conn)
                self.log.info("ws_standalone_busy")
                return None, None
            except SessionNotFound:
                runner.conn_gone(conn)
                self._session_over()
                return None, None
            v = _Virtual(runner, conn, standalone=True)
            self._standalone = (v, asyncio.create_task(self._pump(v)))
            return 0, None

        await runner.seat.take(self, self.registry.context.replicas, attach)

    def _drop_standalone(self) -> asyncio.Task[None] | None:
        """Detach the standalone stream now; return its pump, for the caller to end."""
        if self._standalone is None:
            return None
        v, task = self._standalone
        self._standalone = None
        v.runner.conn_gone(v.conn)  # now: a newer socket's attach must find it free
        v.runner.seat.left(self)
        return task

    def release_standalone(self) -> None:
        task = self._drop_standalone()
        if task is not None:
            task.cancel()
            self.log.info("ws_standalone_taken_over")

    # ------------------------------------------------------------------ writing
    async def _send(self, payload: bytes) -> None:
        async with self._send_lock:  # one frame at a time on the wire
            await self.ws.send_frame(payload, WSMsgType.TEXT)

    async def _pump(self, v: _Virtual) -> None:
        """Write one virtual connection out; re-attach it when the core closes it early."""
        try:
            while True:
                marker = await self._write_out(v)
                if marker.retry_ms is None:  # the stream is done (or taken over, or ended)
                    if v.standalone:
                        self._session_over()
                    return
                if not await self._reattach(v):
                    return
        except ConnFenced:  # this replica lost the session (fencing): it is over here
            await self._write_how_it_ended(v)
            self._session_over()
        except ConnectionError as exc:
            self.log.debug("client_gone", conn=v.conn.id, error=repr(exc))
        finally:
            v.runner.conn_gone(v.conn)

    async def _write_how_it_ended(self, v: _Virtual) -> None:
        """After fencing, whichever replica ended the session's streams wrote how they
        ended (``owner_lost`` for each request never answered): write that too, from the
        store, so the client is told what any resume of the stream would read, not only
        that the socket closed. Bounded; nothing to write without a durable store or a
        position on the stream."""
        position = v.position()
        if self.stored is None or position is None or v.standalone:
            return
        frames = LogFrames(self.stored, self._send, self.principal)
        try:
            pos = parse_event_id(position)
            async with asyncio.timeout(FENCED_TAIL_SECONDS):
                await frames.follow(f"{pos.epoch}.{pos.stream}", pos.seq)
        except (ProxyError, StoreError, ConnectionError, TimeoutError) as exc:
            self.log.info("ws_fenced_tail_not_written", error=repr(exc))

    async def _write_out(self, v: _Virtual) -> CloseMarker:
        while True:
            item = await v.conn.queue.get()
            await v.conn.stored()  # the wire never runs ahead of the store
            if isinstance(item, CloseMarker):
                return item
            assert isinstance(item, Frame)  # framing "message"
            v.conn.written(len(item.payload))
            payload = item.payload
            if v.init_id is not None:
                payload = self._with_session_id(payload, v)
            await self._send(payload)
            v.written = item.event_id

    def _with_session_id(self, payload: bytes, v: _Virtual) -> bytes:
        """The initialize result, with the session id in its ``_meta`` (this socket only)."""
        msg = json.loads(payload)
        result = msg.get("result") if isinstance(msg, dict) else None
        if msg.get("id") != v.init_id or not isinstance(result, dict):
            return payload
        v.init_id = None
        meta = result.get("_meta")
        meta = {**meta} if isinstance(meta, dict) else {}
        meta[SESSION_META] = v.runner.session_id
        return jsonrpc.encode({**msg, "result": {**result, "_meta": meta}})

    async def _guarded(self, work: Awaitable[None]) -> None:
        try:
            await work
        except ConnectionError as exc:
            self.log.debug("client_gone", error=repr(exc))

    async def _reattach(self, v: _Virtual) -> bool:
        """The core ended ``v.conn`` with a reconnect hint: go on from the last frame written.

        The client cannot reconnect a virtual connection itself (2025-11-25 SEP-1699
        polling closes and slow-reader cuts are HTTP matters), so the proxy does it for
        it, from the log: nothing lost, nothing repeated.
        """
        runner, old = v.runner, v.conn
        position = v.position()
        runner.conn_gone(old)
        if runner.session.forgotten:
            return False
        conn = _open(runner)
        try:
            if v.resume is not None and (position is None or self._on_target(position, v)):
                # Still on the resumed stream: resume again, so `{}` still comes last.
                runner.feed(ClientPost(conn.id, [v.resume], last_event_id=position))
            elif position is not None or v.standalone:
                runner.feed(ClientGet(conn.id, position))
            else:
                raise ResumeError("nothing was sent on this connection", reason="unknown_position")
        except ProxyError as exc:
            runner.conn_gone(conn)
            if exc.reason == "stream_completed":  # the client has it all already
                return False
            self.log.info("ws_reattach_failed", conn=old.id, reason=exc.reason, error=exc.message)
            for rid in v.request_ids:  # their answers can no longer come: say so
                await self._send(jsonrpc.encode(exc.to_jsonrpc(rid)))
            return False
        v.conn, v.written, v.attached_from = conn, None, position
        self.log.info("ws_reattached", conn=conn.id, was=old.id, after=position)
        return True

    @staticmethod
    def _on_target(position: str, v: _Virtual) -> bool:
        """Whether ``position`` is on the stream ``v``'s stream/resume names."""
        assert v.resume is not None
        pos = parse_event_id(position)
        return seed.stream_id_for(pos.epoch, pos.stream) == v.resume.params.get("streamId")

    # ------------------------------------------------------------------ ending
    def _session_over(self) -> None:
        """The session ended: close the socket once the in-flight answers are written."""
        if self._closer is None:
            self._closer = asyncio.create_task(self._close_when_drained())

    async def _close_when_drained(self) -> None:
        while self._pumps:
            await asyncio.wait(set(self._pumps))
        if self.registry.context.accepting:
            code, message = CLOSE_SESSION_NOT_FOUND, b"Session not found: it has ended"
        else:
            code, message = WSCloseCode.GOING_AWAY, b"proxy shutting down"
        self.log.info("ws_session_ended", code=int(code))
        await self.ws.close(code=code, message=message)

    async def _teardown(self) -> None:
        """The socket is closed: detach every virtual connection; cancel nothing upstream."""
        if self._closer is not None:  # it waits for the client's close frame
            await asyncio.wait({self._closer}, timeout=_CLOSE_WAIT_SECONDS)
        extra = (self._drop_standalone(), self._closer)
        tasks = {*self._pumps, *(t for t in extra if t is not None)}
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self.log.info("ws_closed", code=self.ws.close_code)
