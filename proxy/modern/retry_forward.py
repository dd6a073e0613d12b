"""MRTR retries that reach a replica other than the one holding the call (issue 19).

A 2026-07-28 call that asked its client something is parked on the replica that runs it;
its ``requestState`` names that replica (:mod:`proxy.core.reqstate`). Behind a balancer
without stickiness the retry may reach any replica:

- **Asker** (:func:`forward_retry`): the state names another replica. If that replica's
  lease lapsed, the call is gone with it: the answer is the error a lost call gets
  (-32000, ``data.reason: owner_lost``; docs/errors.md), not -32602. Else the retry is
  sent to it (:class:`~proxy.forwarding.ForwardedRetry`, ``ahead``), and what the call
  streams there (progress, log messages: :class:`~proxy.forwarding.NotesAhead`) and
  what it answers (:class:`~proxy.forwarding.Answered`) are written to the client as if
  served here: JSON for a lone answer, SSE once a note came.
- **Holder** (:func:`serve_retry`): checks the request again (headers, state, principal)
  and continues its parked call on a :class:`GatheredReply`, which sends each note the
  call streams to the asker's inbox as it comes, and keeps the answer (and any note it
  could not send) for the reply.

The holder answers once the call answers, asks again, or becomes a task, however long
that takes; meanwhile the asker writes the notes as they arrive, sends the client
keepalives, and looks at the holder's lease every half lease (lapsed: ``owner_lost``).
Each note reaches the client once and in order: the notes and the reply travel on one
inbox (a list) in the order the holder sent them, each part says which of the call's
messages it starts at, and the reply carries every note not sent ahead. A client that
leaves cancels the call on the holder (:class:`~proxy.forwarding.RetryCancel`), as a
local client's leaving does.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import structlog
from aiohttp import web

from proxy.core import jsonrpc
from proxy.core.era import METHOD_HEADER, NAME_HEADER
from proxy.core.errors import LostReason, ProxyError, StoreUnavailable, lost_answer
from proxy.core.jsonrpc import Message
from proxy.forwarding import (
    Answered,
    ForwardedRetry,
    NoStream,
    NotesAhead,
    Refused,
    Reply,
    RetryCancel,
)
from proxy.modern.reply import Reply as HttpReply
from proxy.replicas import OwnerUnreachable, Relay, Replicas
from proxy.store.base import StoreError

log = structlog.get_logger("proxy.modern")

VERSION_HEADER = "MCP-Protocol-Version"
RETRY_HEADERS = (VERSION_HEADER, METHOD_HEADER, NAME_HEADER)
"""The headers a modern request mirrors (proxy.core.era.check_request), as it reads them."""

GONE_CHECK_SECONDS = 0.5
"""How often a forwarded retry's wait looks whether its client left (then the call is
cancelled on the holder, as a local one would be)."""

# The façade's entry: answer one modern request of a principal on a reply.
Post = Callable[[Message, str | None, Mapping[str, str], HttpReply], Awaitable[web.StreamResponse]]


class GatheredReply(HttpReply):
    """A reply nobody reads here: what the call streams and its answer are kept, for the
    replica that asked (an :class:`~proxy.forwarding.Answered`); with a ``relay``, each
    note the call streams is sent to that replica as it comes instead."""

    def __init__(self, waits: bool = True, relay: Relay | None = None) -> None:
        # No HTTP request behind it: nothing of the base is used. ``waits=False``: as a
        # client already gone, so that nothing waits on it (a tasks/result of a running task).
        self.messages: list[dict[str, Any]] = []  # the call's, from ``first`` on
        self.first = 0  # how many were relayed ahead (the asker has them)
        self.status = 200
        self.answered = False
        self._waits = waits
        self._relay = relay

    def add_headers(self, headers: dict[str, str]) -> None:
        pass

    @property
    def sse(self) -> web.StreamResponse | None:
        return None

    @property
    def gone(self) -> bool:
        return not self._waits

    async def stream(self, messages: list[dict[str, Any]]) -> None:
        self.messages.extend(messages)  # a keepalive (none) is nothing to keep
        if not messages or self._relay is None:
            return
        try:
            await self._relay(NotesAhead(self.first, list(self.messages)))
        except StoreError as exc:  # kept (all after too): they come with the answer
            log.warning("mrtr_notes_not_relayed", error=str(exc))
            self._relay = None
            return
        self.first += len(self.messages)
        self.messages.clear()

    def due(self) -> float:
        return 3600.0  # no keepalives: nothing is written until the answer

    async def finish(self, message: dict[str, Any], status: int = 200) -> web.StreamResponse:
        self.messages.append(message)
        self.status = status
        self.answered = True
        return web.Response(status=status)


def retry_headers(headers: Mapping[str, str]) -> dict[str, str]:
    """The mirrored headers of a request, keyed as :func:`check_request` reads them."""
    return {name: headers[name] for name in RETRY_HEADERS if name in headers}


async def forward_retry(
    replicas: Replicas,
    server: str,
    holder: str,
    call: str,
    msg: Message,
    principal: str | None,
    headers: Mapping[str, str],
    reply: HttpReply,
) -> web.StreamResponse:
    """Continue, on ``holder``, the parked call ``msg`` retries; answer on ``reply``."""
    if not await replicas.owner_alive(holder):
        log.info("mrtr_holder_gone", holder=holder)
        lost = lost_answer(
            msg.id,
            LostReason.OWNER_LOST,
            "the proxy replica running this call is gone; send the request anew",
        )
        return await reply.finish(lost)
    body = json.dumps(msg.raw, separators=(",", ":"))
    forwarded = ForwardedRetry(server, principal, body, retry_headers(headers), ahead=True)
    cancel = RetryCancel(server, principal, call)
    notes = _NotesWriter(reply)
    try:
        answer = await _wait_for_holder(replicas, holder, forwarded, notes)
    except asyncio.CancelledError:  # the handler is cancelled with its client: the same
        await asyncio.shield(_tell(replicas, holder, cancel))
        raise
    if reply.gone and answer is not None and not isinstance(answer, Answered | Refused):
        await _tell(replicas, holder, cancel)  # as a local call is when its client leaves
    if answer is None:  # the holder died while the call ran on
        log.info("mrtr_holder_lost", holder=holder)
        lost = lost_answer(
            msg.id, LostReason.OWNER_LOST, "the proxy replica running this call is gone"
        )
        return await reply.finish(lost)
    if reply.gone:
        return reply.sse or web.Response(status=499)
    match answer:
        case Answered():
            await notes.write()  # what came ahead of the reply (all of it is in: one inbox)
            return await notes.finish(answer)
        case Refused(status, error):  # (on the stream if keepalives opened one)
            return await reply.finish(error, status=status)
        case _:  # a reply to another kind of request: as good as no answer
            raise OwnerUnreachable("the proxy replica holding this call answered out of turn")


async def _tell(replicas: Replicas, holder: str, cancel: RetryCancel) -> None:
    """Cancel the call on its holder; sent again while the store fails (a second copy
    finds the call cancelled or gone: nothing); past that, the call runs to its end
    unread (wasted work, nothing lost)."""
    with contextlib.suppress(StoreError, StoreUnavailable):
        await replicas.tell(holder, cancel, resend=True)


class _NotesWriter:
    """The notes a holder sends ahead of its reply, written to the client in order, each
    once: a part repeats none it already wrote, whatever came twice or late."""

    def __init__(self, reply: HttpReply) -> None:
        self.reply = reply
        self.written = 0  # how many of the call's messages the client was written
        self.arrived = asyncio.Event()
        self._parts: list[NotesAhead] = []

    def take(self, notes: NotesAhead) -> None:
        self._parts.append(notes)
        self.arrived.set()

    async def write(self) -> None:
        self.arrived.clear()
        while self._parts:
            part = self._parts.pop(0)
            await self._write_from(part.seq, part.messages)

    async def _write_from(self, seq: int, messages: list[dict[str, Any]]) -> None:
        if seq > self.written:  # a part lost on the way: cannot happen on one inbox
            log.error("mrtr_notes_gap", written=self.written, seq=seq)
            self.written = seq
        fresh = messages[self.written - seq :]
        if fresh and not self.reply.gone:
            await self.reply.stream(fresh)
        self.written = max(self.written, seq + len(messages))

    async def finish(self, answered: Answered) -> web.StreamResponse:
        """The rest of the holder's reply: the notes not written yet, then the answer."""
        *notes, last = answered.messages
        await self._write_from(answered.first, notes)
        return await self.reply.finish(last, status=answered.status)


async def _wait_for_holder(
    replicas: Replicas, holder: str, forwarded: ForwardedRetry, notes: _NotesWriter
) -> Reply | None:
    """The holder's reply, however long the call runs there; meanwhile the notes it sends
    ahead, keepalives to the client (as the holder would send them) and, every half
    lease, a look at the holder's lease: None once it lapsed. The client leaving ends the
    wait (the call runs on)."""
    reply = notes.reply
    asking = asyncio.ensure_future(
        replicas.forward(holder, forwarded, timeout=None, ahead=notes.take)
    )
    loop = asyncio.get_running_loop()
    every = replicas.lease_seconds / 2
    looked = loop.time()
    try:
        while True:
            wait = max(0.05, min(every, reply.due(), GONE_CHECK_SECONDS))
            arrived = asyncio.ensure_future(notes.arrived.wait())
            try:
                done, _ = await asyncio.wait({asking, arrived}, timeout=wait)
            finally:
                arrived.cancel()
            if asking in done:
                return asking.result()
            if arrived in done:
                await notes.write()
            if reply.gone:
                return asking.result() if asking.done() else NoStream()
            if reply.due() <= 0:
                await reply.stream([])  # a keepalive: the response turns SSE, as on the holder
            if loop.time() - looked >= every:
                looked = loop.time()
                try:
                    if not await replicas.owner_alive(holder):
                        return None
                except StoreError as exc:  # cannot tell now: the reply may still come
                    log.warning("mrtr_holder_unknown", holder=holder, error=str(exc))
    finally:
        if not asking.done():
            asking.cancel()
            await asyncio.gather(asking, return_exceptions=True)


async def write_answered(reply: HttpReply, answered: Answered) -> web.StreamResponse:
    """What the holder answered, written as it would have written it: JSON for a lone
    answer, else SSE (its notes, then the answer)."""
    *notes, last = answered.messages
    if notes:
        await reply.stream(notes)
    return await reply.finish(last, status=answered.status)


async def serve_retry(post: Post, message: ForwardedRetry, relay: Relay | None = None) -> Reply:
    """The holder's side: ``message``'s request, served by the façade's ``post``
    (``relay``: sends the asker the call's notes as they come)."""
    try:
        messages, batch = jsonrpc.parse_body(message.body)
    except ProxyError as exc:
        return Refused(exc.http_status, exc.to_jsonrpc())
    if batch or len(messages) != 1:
        return Refused(400, ProxyError("a forwarded retry is one request").to_jsonrpc())
    msg = messages[0]
    gathered = GatheredReply(relay=relay)
    try:
        await post(msg, message.principal, message.headers, gathered)
    except ProxyError as exc:
        request_id = exc.request_id if exc.request_id is not None else msg.id
        return Refused(exc.http_status, exc.to_jsonrpc(request_id))
    if not gathered.answered:
        error = ProxyError("the call ended without an answer")
        return Refused(error.http_status, error.to_jsonrpc(msg.id))
    return Answered(gathered.status, gathered.messages, gathered.first)
