"""``/ws`` for sessions and streams another replica holds (issue 19; replicas on Redis).

Behind a balancer without stickiness a socket may reconnect to a replica that does not
hold its session, and a ``stream/resume`` may name a stream another session (on another
replica, or before a restart) made. Both are served as Streamable HTTP serves them
(:mod:`proxy.downstream.remote`, :mod:`proxy.downstream.stored`), framed as messages:

- :class:`LogFrames` writes a stream from the store as frames (one JSON-RPC message
  each): the events after a position, then its live tail until it completes; and the
  seed's ``stream/poll`` / ``stream/resume`` naming a stream of another session, checked
  against its resume token and principal exactly as on ``/mcp``.
- :class:`RemoteSocket` serves a socket whose session is held by another replica: each
  message is forwarded to the holder (:class:`~proxy.forwarding.ForwardedPost`), and the
  stream it opened is followed from the shared log; the session's standalone stream is
  taken there too (:class:`~proxy.forwarding.ForwardedGet` naming this socket: a
  session's newest socket takes it, :mod:`proxy.standalone_seat`) and followed likewise,
  until a newer socket takes it (:class:`StandaloneHold`); closing, the socket tells the
  holder how far it wrote it, so the next socket goes on from there. A
  refusal is an error frame, as on a local socket; the holder saying the session is not
  found (it ended, or is another principal's) closes the socket with 4404, as a local
  socket does. A request stream's frames written are not acknowledged to the holder (a
  write proves nothing: the client's ``stream/resume`` says what it has, as on a local
  socket); the standalone stream's are, at most once per :data:`ACK_SECONDS` (the
  position a newer socket starts from if this one's release is lost, as a local
  socket's standalone stream goes on from what it was sent).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import secrets
import time
from collections.abc import Awaitable, Callable

import structlog
from aiohttp import WSCloseCode, WSMsgType, web

from proxy.core import jsonrpc, seed
from proxy.core.errors import (
    InvalidMessage,
    LostReason,
    ProxyError,
    ResumeError,
    StoreUnavailable,
    lost_answer,
)
from proxy.core.eventid import format_event_id
from proxy.core.jsonrpc import Kind, Message
from proxy.core.socket_route import CLOSE_SESSION_NOT_FOUND, CLOSE_TRY_AGAIN_LATER
from proxy.downstream.remote import RemoteSessions
from proxy.downstream.stored import StoredStreams
from proxy.forwarding import (
    Answered,
    ForwardedGet,
    ForwardedPost,
    NoStream,
    Refused,
    Reply,
    StreamOpened,
)
from proxy.forwarding_seat import StandaloneRelease, WsSocket
from proxy.replicas import OwnerUnreachable
from proxy.standalone_seat import StandaloneHold
from proxy.store.base import COMPLETED, Store, StoreError
from proxy.store.log_tail import LogTail, Stopping
from proxy.store.unavailable import patiently, unavailable

log = structlog.get_logger("proxy.ws")

ACK_SECONDS = 1.0
"""How often a followed standalone stream tells the holder how far it was written."""

RELEASE_WAIT_SECONDS = 5.0
"""How long a closing socket tries to tell the holder how far it wrote the standalone
stream (else the next socket starts after the last position it acknowledged)."""

Send = Callable[[bytes], Awaitable[None]]
Acked = Callable[[str], Awaitable[None]]


class LogFrames:
    """Streams from the store, written to one socket as message frames."""

    def __init__(self, stored: StoredStreams, send: Send, principal: str | None) -> None:
        self.stored = stored
        self.store: Store = stored.store
        self.send = send
        self.principal = principal

    async def follow(
        self,
        key: str,
        after: int,
        acked: Acked | None = None,
        hold: StandaloneHold | None = None,
    ) -> None:
        """Write the events of ``key`` after ``after``, then its tail until it completes
        (``acked`` is told the last event id written, now and then), or until ``hold``
        is stopped."""
        record = await patiently(
            self.store, "read a stream", lambda: self.store.get_stream(key, time.time())
        )
        if record is None or not self.stored.readable(record, self.principal):
            raise ResumeError("the stream has expired or never existed", reason="unknown_stream")
        told = 0.0
        tail = LogTail(self.store, key, after, self.stored.tails)  # (a failing store: again)
        try:
            while isinstance(entries := await tail.queue.get(), list):
                for entry in entries:
                    if hold is None:
                        await self.send(entry.payload)
                        continue
                    async with hold.lock:
                        if hold.stopped:
                            return
                        await self.send(entry.payload)
                        hold.written = entry.seq
                now = time.monotonic()
                if acked is not None and entries and now - told >= ACK_SECONDS:
                    told = now
                    await acked(format_event_id(record.epoch, record.number, entries[-1].seq))
        finally:
            await tail.end()
        if isinstance(entries, ResumeError | StoreError):
            raise entries

    async def seed_request(self, msg: Message) -> None:
        """A ``stream/poll`` / ``stream/resume`` of another session's stream: its answer
        (a resume: the events after the client's position, the live tail, then ``{}``)."""
        try:
            record, after = await self.stored.target(msg, None, self.principal)
            if msg.method == seed.POLL:
                now = time.time()
                rest = await patiently(
                    self.store, "read a stream", lambda: self.store.summary(record.key, after, now)
                )
                done = record.state == COMPLETED
                await self.send(
                    jsonrpc.encode(
                        jsonrpc.ok_response(msg.id, seed.poll_result(record.key, done, rest))
                    )
                )
                return
            log.info("ws_stored_stream_resumed", stream=record.key, after=after)
            await self.follow(record.key, after)
        except ProxyError as exc:  # a ResumeError, or the store past its wait
            await self.send(jsonrpc.encode(exc.to_jsonrpc(msg.id)))
            return
        except Stopping:  # the proxy stops: resumed on another replica
            said = "the proxy is shutting down: resume on another replica"
            stopped = lost_answer(msg.id, LostReason.PROXY_SHUTDOWN, said)
            await self.send(jsonrpc.encode(stopped))
            return
        except StoreError as exc:  # (the tail, past store.unavailable_wait_seconds)
            await self.send(jsonrpc.encode(unavailable("resume a stream", exc).to_jsonrpc(msg.id)))
            return
        await self.send(jsonrpc.encode(jsonrpc.ok_response(msg.id, {})))


class RemoteSocket:
    """One client socket whose session another replica holds."""

    def __init__(
        self,
        ws: web.WebSocketResponse,
        session_id: str,
        owner: str,
        remote: RemoteSessions,
        principal: str | None,
    ) -> None:
        self.ws = ws
        self.session_id = session_id
        self.owner = owner
        self.remote = remote
        self.principal = principal
        self.frames = LogFrames(remote.stored, self._send, principal)
        self.log = log.bind(session=session_id[:8], holder=owner, principal=principal)
        self._send_lock = asyncio.Lock()
        self._pumps: set[asyncio.Task[None]] = set()
        self._closer: asyncio.Task[None] | None = None
        self._token = secrets.token_urlsafe(12)  # this socket, to the holder
        self._hold: StandaloneHold | None = None  # the standalone stream, while it has it
        self._following: asyncio.Event | None = None  # … its release, for a stopping proxy

    async def serve(self) -> None:
        self.log.info("ws_opened_remote", protocol=self.ws.ws_protocol)
        try:
            await self._open_standalone()
            async for frame in self.ws:
                if frame.type is WSMsgType.TEXT:
                    await self._on_text(frame.data)
                elif frame.type is WSMsgType.BINARY:
                    await self._refuse(InvalidMessage("Invalid Request: use text frames"))
                elif frame.type is WSMsgType.ERROR:
                    self.log.info("ws_error", error=repr(frame.data))
                    break
        except ConnectionError as exc:
            self.log.debug("client_gone", error=repr(exc))
        finally:
            await self._teardown()

    # ------------------------------------------------------------------ reading
    async def _on_text(self, data: str) -> None:
        messages: list[Message] = []
        batch = False
        try:
            messages, batch = jsonrpc.parse_body(data.encode())
            try:
                await self._client_messages(messages, batch)
            except StoreError as exc:  # the holder cannot be reached now
                raise OwnerUnreachable(f"the store is unavailable: {exc}") from None
        except ProxyError as exc:
            lone = messages[0] if len(messages) == 1 and not batch else None
            if exc.request_id is None and lone is not None and lone.kind is Kind.REQUEST:
                exc.request_id = lone.id
            await self._refuse(exc)

    async def _client_messages(self, messages: list[Message], batch: bool) -> None:
        lone = messages[0] if len(messages) == 1 and not batch else None
        if lone is not None and lone.method in (seed.POLL, seed.RESUME):
            given = lone.params.get("lastEventId")
            if isinstance(given, str):
                await self.remote.acknowledge(self.session_id, given, self.principal)
            self._spawn(self.frames.seed_request(lone))
            return
        raw = [m.raw for m in messages]
        body = json.dumps(raw if batch else raw[0], separators=(",", ":"))
        lone_id = lone.id if lone is not None and lone.kind is Kind.REQUEST else None
        forwarded = ForwardedPost(
            self.session_id,
            self.remote.server,
            self.principal,
            body,
            request_id=lone_id if isinstance(lone_id, str | int) else None,
        )
        resend = jsonrpc.answers_only(messages)
        await self._take(await self.remote.replicas.forward(self.owner, forwarded, resend=resend))

    async def _open_standalone(self) -> None:
        replicas = self.remote.replicas
        socket = WsSocket(replicas.owner, self._token)
        forwarded = ForwardedGet(self.session_id, self.remote.server, self.principal, socket)
        replicas.standalone_followers[self._token] = self._stop_standalone
        try:
            reply = await replicas.forward(self.owner, forwarded)
        except (ProxyError, StoreError) as exc:  # requests still go through; no standalone
            self.log.warning("ws_standalone_not_opened", error=str(exc))
            return
        if isinstance(reply, Refused) and reply.status == 409:  # an HTTP GET holds it
            self.log.info("ws_standalone_busy")
            return
        await self._take(reply, standalone=True)

    async def _stop_standalone(self) -> int | None:
        """A newer socket takes the standalone stream: stop writing it (the holder asks);
        the seq of the last event written (None: none, it had not begun: the holder's
        reply to this socket's GET may be on its way still, and is then ignored)."""
        hold = self._hold
        if hold is None:
            self._hold = StandaloneHold(0)
            self._hold.stopped = True
            return None
        upto = await hold.stop()
        self.log.info("ws_standalone_taken_over", upto=upto)
        return upto

    async def _take(self, reply: Reply, standalone: bool = False) -> None:
        """Carry out what the holder made of a forwarded request."""
        match reply:
            case StreamOpened(key, after) if standalone:
                if self._hold is None:  # (else taken over before it began)
                    self._hold = StandaloneHold(after)
                    self._following = self.remote.following()
                    self._spawn(self._follow_standalone(key, self._hold))
            case StreamOpened(key, after):
                self._spawn(self._follow(key, after))
            case NoStream():
                pass
            case Answered(_, messages):
                for message in messages:
                    await self._send(jsonrpc.encode(message))
            case Refused(status, error):
                await self._send(jsonrpc.encode(error))
                if status == 404:  # the session ended (or is not this client's)
                    self._session_over()
            case _:
                raise ProxyError("the replica holding this session answered out of turn")

    async def _follow(self, key: str, after: int) -> None:
        # Not acknowledged as written: a write proves nothing (the client may never read
        # it), and the holder resumes a request stream after what it was told the client
        # has. The client's own stream/resume lastEventId tells it (_client_messages).
        try:
            await self.frames.follow(key, after)
        except ResumeError as exc:  # gone while followed: like a local stream lost
            self.log.info("ws_remote_stream_lost", stream=key, reason=exc.reason)
        except StoreError as exc:
            self._store_lost(key, exc)

    async def _follow_standalone(self, key: str, hold: StandaloneHold) -> None:
        try:
            await self.frames.follow(key, hold.written, self._acknowledge, hold)
        except ResumeError as exc:
            self.log.info("ws_remote_stream_lost", stream=key, reason=exc.reason)
        except StoreError as exc:
            self._store_lost(key, exc)
            return
        if not hold.stopped:  # the standalone stream ends with its session
            self._session_over()

    def _store_lost(self, key: str, exc: StoreError) -> None:
        """A stream followed here cannot be read on (the store failed for longer than
        ``store.unavailable_wait_seconds``): close 1013 now, as an upgrade the store
        cannot place is closed; the client reconnects and resumes from what it has."""
        if isinstance(exc, Stopping):  # the proxy stops: 1001, as every socket
            code, why = int(WSCloseCode.GOING_AWAY), b"proxy shutting down"
        else:
            self.log.warning("ws_remote_stream_store_lost", stream=key, error=str(exc))
            code, why = CLOSE_TRY_AGAIN_LATER, b"store unavailable"
        if self._closer is None:
            self._closer = asyncio.create_task(self._close(code, why))

    async def _close(self, code: int, why: bytes) -> None:
        await self.ws.close(code=code, message=why)

    async def _release_standalone(self) -> None:
        """Closing: tell the holder how far this socket wrote the standalone stream."""
        hold = self._hold
        try:
            if hold is not None and not hold.stopped:
                # (sent again while the store fails: the holder ignores a second one)
                with contextlib.suppress(StoreUnavailable, TimeoutError):
                    async with asyncio.timeout(RELEASE_WAIT_SECONDS):
                        upto = await hold.stop()  # (a frame being written ends first)
                        release = StandaloneRelease(
                            self.session_id, self.remote.server, self.principal, self._token, upto
                        )
                        await self.remote.replicas.tell(self.owner, release, resend=True)
        finally:  # (kept until the release is sent: a takeover meanwhile gets the same)
            self.remote.replicas.standalone_followers.pop(self._token, None)
            if self._following is not None:
                self.remote.released(self._following)

    async def _acknowledge(self, event_id: str) -> None:
        await self.remote.acknowledge(self.session_id, event_id, self.principal)

    # ------------------------------------------------------------------ writing
    async def _send(self, payload: bytes) -> None:
        async with self._send_lock:
            await self.ws.send_frame(payload, WSMsgType.TEXT)

    async def _refuse(self, exc: ProxyError) -> None:
        self.log.info("ws_frame_refused", code=exc.jsonrpc_code, reason=exc.reason)
        await self._send(jsonrpc.encode(exc.to_jsonrpc()))

    def _spawn(self, work: Awaitable[None]) -> None:
        task = asyncio.ensure_future(self._guarded(work))
        self._pumps.add(task)
        task.add_done_callback(self._pumps.discard)

    async def _guarded(self, work: Awaitable[None]) -> None:
        try:
            await work
        except ConnectionError as exc:
            self.log.debug("client_gone", error=repr(exc))
        except (ProxyError, StoreError) as exc:  # the store failed us: the client resumes
            self.log.warning("ws_remote_follow_failed", error=str(exc))

    # ------------------------------------------------------------------ ending
    def _session_over(self) -> None:
        if self._closer is None:
            self._closer = asyncio.create_task(self._close_when_drained())

    async def _close_when_drained(self) -> None:
        current = asyncio.current_task()
        while pending := {t for t in self._pumps if t is not current}:
            await asyncio.wait(pending)
        self.log.info("ws_session_ended", code=CLOSE_SESSION_NOT_FOUND)
        await self.ws.close(
            code=CLOSE_SESSION_NOT_FOUND, message=b"Session not found: it has ended"
        )

    async def _teardown(self) -> None:
        if self._closer is not None:
            await asyncio.wait({self._closer}, timeout=10.0)
        await self._release_standalone()
        tasks = {*self._pumps, *([self._closer] if self._closer is not None else [])}
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self.log.info("ws_closed", code=self.ws.close_code)
