"""Requests for sessions another replica holds (a shared store: :mod:`proxy.replicas`).

The request is forwarded to the holder; what it becomes comes back as a reply, and the
stream it opened is served from the shared log by :class:`StoredStreams` (so the events
reach the client from whichever replica it asked). ``stream/poll`` and ``stream/resume``
are not forwarded: any replica serves them from the log.

Every forwarded message names the principal the request comes from (``principal``: the
bearer token's, None when authentication is off) and the server whose path it came to
(``server``): the holder serves it only if the session is that principal's and that
server's, so a replica never asks on behalf of someone else, nor at the wrong server.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import secrets

import structlog
from aiohttp import web

from proxy.core import jsonrpc, lone_answer, seed
from proxy.core.errors import ProxyError, StoreUnavailable
from proxy.core.jsonrpc import Kind, Message
from proxy.core.protocol import SESSION_HEADER
from proxy.core.sse import encode_event
from proxy.downstream.auth import principal_of
from proxy.downstream.stored import JsonHold, StoredStreams
from proxy.downstream.wire import forwarded_refusal
from proxy.forwarding import (
    Answered,
    Deleted,
    ForwardedAck,
    ForwardedDelete,
    ForwardedGet,
    ForwardedPost,
    NoStream,
    Refused,
    Reply,
    StreamOpened,
)
from proxy.forwarding_seat import StandaloneRelease, WsSocket
from proxy.modern.reply import Reply as HttpReply
from proxy.modern.retry_forward import write_answered
from proxy.replicas import Replicas
from proxy.servers import Server
from proxy.standalone_seat import StandaloneHold
from proxy.store.base import StoreError

log = structlog.get_logger("proxy.remote")

RELEASE_WAIT_SECONDS = 5.0
"""How long an ended listen ``GET`` tries to tell the holder how far it wrote (else the
next listener starts after the last position it acknowledged)."""


class RemoteSessions:
    def __init__(self, replicas: Replicas, stored: StoredStreams, server: Server) -> None:
        self.replicas = replicas
        self.stored = stored
        self._settings = server  # its config is read at each request: a reload replaces it
        self.server = server.name  # the name of the server whose endpoint this serves
        # Acknowledgements on their way (see acknowledge): ended before the replicas stop.
        self._acks: set[asyncio.Task[None]] = set()
        self._listens: set[asyncio.Event] = set()  # set once each has told its holder
        replicas.on_stop(self.close)

    async def post(
        self,
        request: web.Request,
        session_id: str,
        messages: list[Message],
        batch: bool,
        last_event_id: str | None,
    ) -> web.StreamResponse:
        owner = await self.replicas.owner_of(session_id)
        principal = principal_of(request)
        lone = messages[0] if len(messages) == 1 else None
        if lone is not None and lone.method in (seed.POLL, seed.RESUME):
            for given in (last_event_id, lone.params.get("lastEventId")):
                if isinstance(given, str):
                    await self.acknowledge(session_id, given, principal)
            return await self.stored.post(request, session_id, lone, last_event_id)
        raw = [m.raw for m in messages]
        body = json.dumps(raw if batch else raw[0], separators=(",", ":"))
        lone_id = lone.id if lone is not None and lone.kind is Kind.REQUEST else None
        forwarded = ForwardedPost(
            session_id,
            self.server,
            principal,
            body,
            last_event_id=last_event_id,
            request_id=lone_id if isinstance(lone_id, str | int) else None,
        )
        resend = jsonrpc.answers_only(messages)
        reply = await self.replicas.forward(owner, forwarded, resend=resend)
        hold = None  # as on the holder: a lone request (no batch), JSON accepted
        if lone_id is not None and lone_answer.prefers_json(request.headers.get("Accept")):
            hold = self.json_hold
        return await self._answer(request, session_id, reply, hold)

    @property
    def json_hold(self) -> JsonHold | None:
        """A lone request's large answer as JSON, as on the holder (None: always SSE), as
        ``sse.json_answer_*`` are configured now (the next request follows a reload)."""
        return JsonHold.of(self._settings.config.sse)

    async def acknowledge(
        self, session_id: str, last_event_id: str, principal: str | None = None
    ) -> None:
        """Tell the holder the client (``principal``: whose request named it) has
        everything up to ``last_event_id`` (under ``overflow: block`` the holder may then
        drop it and let its server go on).

        Returns at once: finding the holder and telling it (three store round trips on
        Redis) runs in a task of its own, so a resume is not held back by a hint. Best
        effort: a holder gone, a store down, or a session of another principal loses
        nothing but the hint. (Still ``async`` so that callers' ``await`` stays valid.)"""
        ack = ForwardedAck(session_id, self.server, principal, last_event_id)
        task = asyncio.create_task(self._tell_holder(ack), name="remote-ack")
        self._acks.add(task)
        task.add_done_callback(self._acks.discard)

    async def _tell_holder(self, ack: ForwardedAck) -> None:
        try:
            owner = await self.replicas.owner_of(ack.session)
            if owner != self.replicas.owner:
                await self.replicas.tell(owner, ack)
        except (ProxyError, StoreError) as exc:  # the hint is lost, nothing else
            log.info("remote_ack_not_delivered", error=str(exc))
        except Exception:  # a bug: said loudly, yet it never reaches the resume it came from
            log.exception("remote_ack_failed")

    async def close(self) -> None:
        """Cancel the acknowledgements still on their way, and wait until they are gone;
        wait (for up to ``RELEASE_WAIT_SECONDS``) for the standalone streams followed here
        to tell their holders how far they wrote (:meth:`following`; the proxy stopping
        ended them: :meth:`Tails.stop <proxy.store.log_tail.Tails.stop>`)."""
        acks = list(self._acks)
        for task in acks:
            task.cancel()
        await asyncio.gather(*acks, return_exceptions=True)
        listens = list(self._listens)
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(RELEASE_WAIT_SECONDS):
                for released in listens:
                    await released.wait()

    def following(self) -> asyncio.Event:
        """A standalone stream of another replica's session begins to be followed here
        (a listen ``GET``, a ``/ws`` socket): the proxy, stopping, waits for the event
        (:meth:`released`) before it leaves the replicas (:meth:`close`)."""
        released = asyncio.Event()
        self._listens.add(released)
        return released

    def released(self, released: asyncio.Event) -> None:
        """That follower told the holder how far it wrote (or gave up)."""
        self._listens.discard(released)
        released.set()

    async def get(self, request: web.Request, session_id: str) -> web.StreamResponse:
        """The session's standalone stream (a listen ``GET``), held as a remote socket
        holds it (:mod:`proxy.standalone_seat`): a newer listener anywhere takes it (this
        response then ends between two events), and once this one ends the holder hears
        how far it wrote, so the next starts after that."""
        owner = await self.replicas.owner_of(session_id)
        principal = principal_of(request)
        token = secrets.token_urlsafe(12)
        hold: StandaloneHold | None = None

        async def stop() -> int | None:  # the holder asks: a newer listener takes it
            nonlocal hold
            if hold is None:  # not begun: the reply on its way is ignored
                hold = StandaloneHold(0)
                hold.stopped = True
                return None
            upto = await hold.stop()
            log.info("remote_listen_taken_over", session=session_id, upto=upto)
            return upto

        self.replicas.standalone_followers[token] = stop
        released: asyncio.Event | None = None
        socket = WsSocket(self.replicas.owner, token)
        try:
            reply = await self.replicas.forward(
                owner, ForwardedGet(session_id, self.server, principal, socket)
            )
            if not isinstance(reply, StreamOpened):
                return await self._answer(request, session_id, reply)
            if hold is not None:  # taken over before it began
                return web.Response(status=409, headers={SESSION_HEADER: session_id})
            hold = StandaloneHold(reply.after)
            released = self.following()
            opening = b""
            if reply.priming is not None:
                opening = encode_event(None, event_id=reply.priming, retry_ms=reply.retry_ms)
            return await self.stored.follow(
                request, session_id, reply.stream, reply.after, opening, listen=hold
            )
        finally:
            try:
                await self._release(owner, session_id, principal, token, hold)
            finally:
                if released is not None:
                    self.released(released)

    async def _release(
        self,
        owner: str,
        session_id: str,
        principal: str | None,
        token: str,
        hold: StandaloneHold | None,
    ) -> None:
        """A listen ``GET`` ended: tell the holder how far it wrote (unless a newer one
        took the stream from it), then forget it."""
        log.info("remote_listen_ended", session=session_id)
        try:
            if hold is not None and not hold.stopped:
                # (sent again while the store fails: the holder ignores a second one)
                with contextlib.suppress(StoreUnavailable, TimeoutError):
                    async with asyncio.timeout(RELEASE_WAIT_SECONDS):
                        upto = await hold.stop()
                        release = StandaloneRelease(session_id, self.server, principal, token, upto)
                        await self.replicas.tell(owner, release, resend=True)
        finally:  # (kept until the release is sent: a takeover meanwhile gets the same)
            self.replicas.standalone_followers.pop(token, None)

    async def delete(self, request: web.Request, session_id: str) -> web.StreamResponse:
        owner = await self.replicas.owner_of(session_id)
        forwarded = ForwardedDelete(session_id, self.server, principal_of(request))
        return await self._answer(
            request, session_id, await self.replicas.forward(owner, forwarded)
        )

    async def _answer(
        self, request: web.Request, session_id: str, reply: Reply, hold: JsonHold | None = None
    ) -> web.StreamResponse:
        match reply:
            case StreamOpened(stream, after, priming, retry_ms):
                opening = b""
                if priming is not None:  # the holder primed it: so does this replica
                    opening = encode_event(None, event_id=priming, retry_ms=retry_ms)
                return await self.stored.follow(request, session_id, stream, after, opening, hold)
            case NoStream():
                return web.Response(status=202, headers={SESSION_HEADER: session_id})
            case Deleted():
                return web.Response(status=200)
            case Refused(status, error):
                return forwarded_refusal(status, error)
            case Answered():  # served by the holder's modern side (a 2025-11-25 task request)
                headers = {SESSION_HEADER: session_id}
                return await write_answered(
                    HttpReply(request, self.stored.keepalive, headers), reply
                )
            case _:  # a reply to another kind of request: the holder is confused
                return web.json_response(
                    ProxyError(
                        "the replica holding this session answered out of turn"
                    ).to_jsonrpc(),
                    status=500,
                )
