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

import json

from aiohttp import web

from proxy.core import seed
from proxy.core.errors import ProxyError
from proxy.core.jsonrpc import Kind, Message
from proxy.core.protocol import SESSION_HEADER
from proxy.downstream.auth import principal_of
from proxy.downstream.stored import StoredStreams
from proxy.replicas import Replicas
from proxy.store.base import StoreError


class RemoteSessions:
    def __init__(self, replicas: Replicas, stored: StoredStreams, server: str) -> None:
        self.replicas = replicas
        self.stored = stored
        self.server = server  # the name of the server whose endpoint this serves

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
        reply = await self.replicas.forward(
            owner,
            {
                "kind": "post",
                "session": session_id,
                "server": self.server,
                "principal": principal,
                "body": body,
                "last_event_id": last_event_id,
                "request_id": lone_id,
            },
        )
        return await self._answer(request, session_id, reply)

    async def acknowledge(
        self, session_id: str, last_event_id: str, principal: str | None = None
    ) -> None:
        """Tell the holder the client (``principal``: whose request named it) has
        everything up to ``last_event_id`` (under ``overflow: block`` the holder may then
        drop it and let its server go on). Best effort: a holder gone, a store down, or a
        session of another principal loses nothing but the hint."""
        try:
            owner = await self.replicas.owner_of(session_id)
            if owner != self.replicas.owner:
                ack = {
                    "kind": "ack",
                    "session": session_id,
                    "server": self.server,
                    "principal": principal,
                    "last_event_id": last_event_id,
                }
                await self.replicas.tell(owner, ack)
        except (ProxyError, StoreError):
            pass

    async def get(self, request: web.Request, session_id: str) -> web.StreamResponse:
        return await self._forward_bare("get", request, session_id)

    async def delete(self, request: web.Request, session_id: str) -> web.StreamResponse:
        return await self._forward_bare("delete", request, session_id)

    async def _forward_bare(
        self, kind: str, request: web.Request, session_id: str
    ) -> web.StreamResponse:
        """A request with no body (``get``, ``delete``) to the session's holder."""
        owner = await self.replicas.owner_of(session_id)
        message = {
            "kind": kind,
            "session": session_id,
            "server": self.server,
            "principal": principal_of(request),
        }
        reply = await self.replicas.forward(owner, message)
        return await self._answer(request, session_id, reply)

    async def _answer(
        self, request: web.Request, session_id: str, reply: dict[str, object]
    ) -> web.StreamResponse:
        outcome = reply.get("outcome")
        if outcome == "sse":
            key, after = reply["stream"], reply["after"]
            assert isinstance(key, str) and isinstance(after, int)
            return await self.stored.follow(request, session_id, key, after)
        if outcome == "accepted":
            return web.Response(status=202, headers={SESSION_HEADER: session_id})
        if outcome == "deleted":
            return web.Response(status=200)
        status = reply.get("status")
        return web.json_response(
            reply.get("error"), status=status if isinstance(status, int) else 500
        )
