"""This replica among others on a shared store (Redis): its lease, its inbox, forwarding,
and ending what a dead replica left running (DESIGN.md §9).

- **Lease.** A replica holds ``replica:<owner>`` in the store for ``store.lease_seconds``
  and renews it three times per period. Its sessions' records name it; while the lease
  holds, they are its sessions.
- **Forwarding.** A client request for a session held elsewhere is sent to the holder's
  inbox (:meth:`Replicas.forward`); the holder feeds it to the session and replies with
  what the request became (202, an error, or "the events of stream K after N"), which the
  asking replica then serves from the shared log. The holder commits the stream before it
  replies, so the log the asker reads has it. The requests and replies are the typed
  messages of :mod:`proxy.forwarding`; this module adds only their envelope (``id``,
  ``from``, ``reply_to``). A holder may send parts of a reply ahead of it (an MRTR
  retry's notes, as its call streams them: a ``relay``); they travel on the same inbox,
  so the asker takes them in order, before the reply.
- **A replica that died.** Its lease lapses. Requests for its sessions get 404 (the
  client initializes again); every replica looks, every half lease, for live streams whose
  owner's lease is gone, and one of them (the one that takes ``reaper:<owner>``) ends
  them: an error for each request never answered (``data.reason: owner_lost``), the
  seed's end notification if announced, then COMPLETED, resumable until retention ends.
  Each ending is a takeover of the stream's fencing token (:mod:`proxy.store.fencing`).
- **A replica that was only paused** (or cut off from Redis) past its lease learns it at
  its first renewal, which finds the lease lapsed (or at its first write, which the store
  refuses): its fencing token goes stale, every session it held is lost (upstreams
  stopped, nothing more written), it takes its lease again, and ends what of its own is
  still live (``owner_lost``) unless a reaper did.
- **A lease that was lost, not lapsed** (its key went with a Redis master's data, a
  flush, a failover: :mod:`proxy.replica_lease` tells which) is taken again, only if
  nobody holds it, and the sessions are kept, unless a replica reaped it meanwhile
  (``reaper:<owner>`` is held): then they are lost as above. The reaper checks the lease
  again once it holds ``reaper:<owner>``, and the holder checks ``reaper:<owner>`` once it
  holds its lease again, so one of the two always sees the other. Other replicas
  presume a lease found missing alive for half a lease, and reap it only once it was
  missing at two looks that far apart. One that takes an owner for gone and acts on it
  (a client told its session is gone, a call ended ``owner_lost``) holds
  ``reaper:<owner>`` first (:meth:`Replicas.owner_alive`): an owner only cut off from
  the store, back, finds it and loses its sessions, so what the client was told holds.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import itertools
import time
from collections.abc import Awaitable, Callable
from typing import Any

import structlog

from proxy import tracing
from proxy.core.errors import ProxyError, SessionNotFound, StoreUnavailable
from proxy.core.protocol import SERVER_ERROR
from proxy.forwarding import Forwarded, NotesAhead, Refused, Reply
from proxy.forwarding_fields import MalformedForward
from proxy.forwarding_wire import (
    decode_notes,
    decode_reply,
    decode_request,
    encode_notes,
    encode_reply,
    encode_request,
)
from proxy.replica_lease import Clock, LeaseClock
from proxy.replica_reaper import Reaping
from proxy.store.base import Store, StoreError
from proxy.store.fencing import Fence
from proxy.store.open import end_orphans
from proxy.store.unavailable import patiently, unavailable

log = structlog.get_logger("proxy.replicas")

FORWARD_TIMEOUT_SECONDS = 30.0
REPLY_PATIENCE_SECONDS = 300.0
"""How long a holder goes on sending a reply the store would not take (then drops it)."""
HOLDERS_KEPT = 10_000  # sessions whose last holder is remembered (Replicas._holders)

# Sends the asker of a request served here a part of the reply ahead of it (NotesAhead).
Relay = Callable[[NotesAhead], Awaitable[None]]
# What the registry does with a request forwarded here (Registry.serve_forwarded).
Serve = Callable[[Forwarded, Relay], Awaitable[Reply]]
# Takes the parts a request's holder sends ahead of its reply (in order, once each).
Ahead = Callable[[NotesAhead], None]
# Stops a /ws socket here writing a standalone stream another replica holds; the last
# seq it wrote, None if it had not begun (proxy/standalone_seat.py).
Follower = Callable[[], Awaitable[int | None]]
Stop = Callable[[], Awaitable[None]]


class OwnerUnreachable(ProxyError):
    """The replica holding the session did not answer a forwarded request in time (or
    answered what this replica cannot read)."""

    jsonrpc_code = SERVER_ERROR
    http_status = 503
    reason = "owner_unreachable"


class Replicas(Reaping):
    """Owns this replica's lease, inbox listener and reaper (three tasks), and the
    replies it waits for."""

    def __init__(
        self,
        store: Store,
        owner: str,
        lease_seconds: float,
        retention: float,
        serve: Serve,
        fence: Fence | None = None,
        clock: Clock = time.monotonic,
    ) -> None:
        self.store = store
        self.owner = owner
        self.fence = fence if fence is not None else Fence(owner)
        self.fence.on_lost(self._orphan)
        self._orphaned: list[str] = []  # stale tokens whose live streams are still to end
        self._renew_now = asyncio.Event()
        self._epoch_seen = ""
        self._flushed_at: float | None = None  # monotonic: when the epoch was seen change
        self.lease_seconds = lease_seconds
        self.leases = LeaseClock(lease_seconds, clock)
        self._retention = retention
        self._serve = serve
        self._tasks: list[asyncio.Task[None]] = []
        self._serving: set[asyncio.Task[None]] = set()
        self._replies: dict[int, asyncio.Future[dict[str, Any]]] = {}
        self._ahead: dict[int, Ahead] = {}  # the requests whose notes come ahead
        # The /ws sockets here writing a standalone stream another replica holds: token →
        # how to stop one (a newer socket takes it: StandaloneTakeover).
        self.standalone_followers: dict[str, Follower] = {}
        self._ids = itertools.count(1)
        # Session -> the replica last seen holding it (the newest HOLDERS_KEPT): where a
        # request for it is likely to go, so that its holder's lease is read with its
        # record (:meth:`_owner_of`). A guess only: both are read fresh each time.
        self._holders: dict[str, str] = {}
        self._on_stop: list[Stop] = []  # what uses the replicas, stopped before they are
        self.history_lost_at: float | None = None  # the store's epoch changed (a flush)

    # ------------------------------------------------------------------ lifetime
    async def start(self) -> None:
        lease = f"replica:{self.owner}"
        sent = self.leases.clock()
        if not await self.store.acquire_lease(lease, self.owner, self.lease_seconds, time.time()):
            raise StoreError(f"the replica lease {lease} is held by another process")
        self.leases.renewed(sent)
        self._epoch_seen = self.store.epoch
        for name, loop in (("renew", self._renew), ("inbox", self._listen), ("reap", self._reap)):
            self._tasks.append(asyncio.create_task(loop(), name=f"replicas-{name}"))
        log.info("replica_started", owner=self.owner, lease_seconds=self.lease_seconds)

    def on_stop(self, stop: Stop) -> None:
        """Await ``stop`` first when the replicas stop (work of its own that needs them)."""
        self._on_stop.append(stop)

    async def stop(self) -> None:
        for stop in self._on_stop:
            await stop()
        for task in [*self._tasks, *self._serving]:
            task.cancel()
        await asyncio.gather(*self._tasks, *self._serving, return_exceptions=True)
        self._tasks.clear()
        for waiting in self._replies.values():
            waiting.cancel()
        with contextlib.suppress(StoreError):
            await self.store.release_lease(f"replica:{self.owner}", self.owner)

    async def _renew(self) -> None:
        while True:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self.lease_seconds / 3):
                    await self._renew_now.wait()
            self._renew_now.clear()
            try:
                await self.renew_once()
            except StoreError as exc:
                self.leases.unreachable()
                log.warning("replica_lease_not_renewed", error=str(exc))

    def _orphan(self, stale: str) -> None:
        """The fencing token went stale: end what is still live under it, at once."""
        self._orphaned.append(stale)
        self._renew_now.set()

    async def renew_once(self) -> None:
        """Renew the lease; if it lapsed, lose every session (the fencing token goes
        stale) and take it again; if its key was lost, take it again and keep them
        (unless it was reaped meanwhile); then end what the stale tokens left live."""
        lease = f"replica:{self.owner}"
        sent = self.leases.clock()
        held = await self.store.renew_lease(lease, self.owner, self.lease_seconds, time.time())
        self.leases.answered(sent)
        await self._check_epoch()
        if held:
            self.leases.renewed(sent)
        else:
            lost = self._flushed_lately() or self.leases.lost_not_lapsed(sent)
            if not lost and not self._orphaned:
                self.fence.lost("lease_lapsed")  # another replica may be reaping it
            if not await self.store.acquire_lease(
                lease, self.owner, self.lease_seconds, time.time()
            ):  # another process has this replica's name: cannot happen, say so if it does
                log.error("replica_lease_taken", owner=self.owner)
                return
            self.leases.renewed(sent)
            reaper = await self._reaper_of_self() if lost else None
            if reaper is not None and not self._orphaned:
                self.fence.lost("lease_reaped")  # its streams were (being) ended: lost
            log.info("replica_lease_taken_again", owner=self.owner, lost=lost, reaper=reaper)
        while self._orphaned:
            await end_orphans(
                self.store,
                self.owner,
                self._retention,
                "owner_lost",
                fence=self.fence.token,
                spare=self.fence.token,
            )
            self._orphaned.pop(0)

    async def _reaper_of_self(self) -> str | None:
        """Who holds ``reaper:<this owner>`` (ending its streams), read once this replica
        holds its lease again; ``"unknown"`` if the store cannot say (as good as reaped)."""
        try:
            return await self.store.lease_owner(f"reaper:{self.owner}", time.time())
        except StoreError as exc:
            log.warning("replica_reaper_unknown", error=str(exc))
            return "unknown"

    async def _check_epoch(self) -> None:
        """Read the store's epoch; note when it changed (flushed or replaced: resumes
        into what was held get explicit errors, and every lease went with the data)."""
        sent = self.leases.clock()
        epoch = await self.store.current_epoch()
        self.leases.answered(sent)  # (stalled: the lease may have expired meanwhile)
        if epoch == self._epoch_seen:
            return
        log.error("store_history_lost", epoch_was=self._epoch_seen, epoch=epoch)
        self._epoch_seen = epoch
        self._flushed_at = self.leases.clock()
        if self.history_lost_at is None:
            self.history_lost_at = time.time()

    def _flushed_lately(self) -> bool:
        """The store's data was lost less than a lease ago (this replica saw its epoch
        change): a lease missing now went with it, not lapsed."""
        at = self._flushed_at
        return at is not None and self.leases.clock() - at < self.lease_seconds

    # ------------------------------------------------------------------ owners
    async def owner_alive(self, owner: str, seen: tuple[bool, float] | None = None) -> bool:
        """Whether ``owner`` holds its lease, or is presumed to (found missing just now
        after it was seen held: its key may have been lost, and it takes it again).
        ``seen``: whether it held it in a read already made, and when that was sent.

        False only once this replica holds ``reaper:<owner>`` (or another does), since a
        caller acts on it (a client told its session is gone, a call ended
        ``owner_lost``): ``owner``, were it only cut off from the store and back, finds
        itself reaped when it takes its lease again and loses its sessions too, so what
        the client was told stays true (:meth:`_declare_gone`)."""
        return await self._presumed_alive(owner, seen) or not await self._declare_gone(owner)

    async def _presumed_alive(self, owner: str, seen: tuple[bool, float] | None = None) -> bool:
        """``owner`` holds its lease or is presumed to (:meth:`LeaseClock.note`); no claim."""
        if owner == self.owner:
            return True
        if seen is None:
            sent = self.leases.clock()
            seen = await self._holds_lease(owner), sent
        held, sent = seen
        self.leases.answered(sent)  # (a stalled store: the lease may have expired in it)
        return self.leases.note(owner, held)

    async def _declare_gone(self, owner: str) -> bool:
        """Claim ``owner`` (:meth:`Reaping._claim`, kept: the reaper's own claim): False
        if it came back before the claim (it keeps its sessions), else True (it finds
        the claim when it takes its lease again)."""
        return await self._claim(owner) != "back"

    async def _holds_lease(self, owner: str) -> bool:
        return await self.store.lease_owner(f"replica:{owner}", time.time()) == owner

    async def owner_of(self, session_id: str) -> str:
        """The live replica holding ``session_id``; SessionNotFound if none does; the
        store waited for a bounded time (then StoreUnavailable)."""
        return await patiently(self.store, "find a session", lambda: self._owner_of(session_id))

    async def _owner_of(self, session_id: str) -> str:
        last = self._holders.pop(session_id, None)  # (put back last: the newest stay)
        seen = None
        if last is None or last == self.owner:
            record = await self.store.get_session(session_id, time.time())
        else:
            # The record and the lease of the replica last seen holding it, in one round
            # trip; what decides is the fresh record's owner and that owner's fresh lease
            # (a session taken over since: its new holder's lease is read then).
            sent = self.leases.clock()
            record, held_by = await self.store.session_and_lease(
                session_id, f"replica:{last}", time.time()
            )
            if record is not None and record.owner == last:
                seen = held_by == last, sent
        if record is None:
            raise SessionNotFound("Session not found")
        if not await self.owner_alive(record.owner, seen):
            raise SessionNotFound("Session not found: the replica that held it is gone")
        self._holders[session_id] = record.owner
        if len(self._holders) > HOLDERS_KEPT:
            del self._holders[next(iter(self._holders))]  # the oldest seen
        return record.owner

    # ------------------------------------------------------------------ forwarding
    async def forward(
        self,
        owner: str,
        request: Forwarded,
        timeout: float | None = FORWARD_TIMEOUT_SECONDS,
        ahead: Ahead | None = None,
        resend: bool = False,
    ) -> Reply:
        """Send ``request`` to ``owner`` and wait for its reply (up to ``timeout``; None:
        the caller bounds the wait itself); ``ahead`` takes the parts sent before it.

        A request that may reach the holder twice (``resend``: a client's answers, which
        the holder drops once it has them) is sent again while the store fails, for up
        to ``store.unavailable_wait``; any other is refused at once, as it may have been
        delivered (:mod:`proxy.store.unavailable`)."""
        number = next(self._ids)
        waiting: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._replies[number] = waiting
        if ahead is not None:
            self._ahead[number] = ahead
        try:
            with tracing.forward(owner, request) as carrier:  # the trace goes along
                envelope = {"id": number, "from": self.owner, **carrier}
                message = {**encode_request(request), **envelope}
                try:
                    await self._send(owner, message, "forward a request", resend)
                except StoreError as exc:  # (sent once: it may have been delivered)
                    raise unavailable("forward a request", exc) from exc
                async with asyncio.timeout(timeout):
                    # A caller bounding the wait itself (timeout None) watches the holder too.
                    wire = await (
                        waiting if timeout is None else self._reply_while_alive(owner, waiting)
                    )
        except TimeoutError:
            raise OwnerUnreachable(
                "the proxy replica holding this session did not answer; try again"
            ) from None
        finally:
            self._replies.pop(number, None)
            self._ahead.pop(number, None)
        try:
            return decode_reply(wire)
        except MalformedForward as exc:  # another version, or a bug: as good as no answer
            log.error("replica_reply_malformed", owner=owner, error=str(exc))
            raise OwnerUnreachable(
                "the proxy replica holding this session answered what this one cannot read"
            ) from None

    async def _reply_while_alive(
        self, owner: str, waiting: asyncio.Future[dict[str, Any]]
    ) -> dict[str, Any]:
        """``waiting``'s reply; every half lease, a look at ``owner``'s lease: a holder
        that died (or was paused past it) will never answer, so its session is gone
        (404, the client initializes again; its calls end with ``owner_lost``) now, not
        at the forward timeout."""
        while True:
            done, _ = await asyncio.wait({waiting}, timeout=self.lease_seconds / 2)
            if done:
                return waiting.result()
            try:
                alive = await self.owner_alive(owner)
            except StoreError:  # cannot tell now: the reply may still come
                continue
            if not alive:
                raise SessionNotFound("Session not found: the replica that held it is gone")

    async def tell(self, owner: str, request: Forwarded, resend: bool = False) -> None:
        """Send ``request`` to ``owner`` without waiting for its reply (which is dropped);
        one that may reach it twice (``resend``) is sent again while the store fails, for
        up to ``store.unavailable_wait`` (then StoreUnavailable), as :meth:`forward`."""
        message = {**encode_request(request), "id": 0, "from": self.owner}
        await self._send(owner, message, "tell another replica", resend)

    async def _send(self, to: str, message: dict[str, Any], doing: str, resend: bool) -> None:
        """Put ``message`` in ``to``'s inbox. One that may arrive twice (``resend``) is
        sent again while the store fails, for up to ``store.unavailable_wait``
        (:func:`~proxy.store.unavailable.patiently`: then StoreUnavailable); any other is
        sent once (StoreError: it may have been delivered)."""
        if resend:
            await patiently(self.store, doing, functools.partial(self.store.send, to, message))
        else:
            await self.store.send(to, message)

    async def _listen(self) -> None:
        while True:
            try:
                async for message in self.store.receive(self.owner):
                    self._take(message)
            except StoreError as exc:
                log.warning("replica_inbox_failed", error=str(exc))
                await asyncio.sleep(1.0)

    def _take(self, message: dict[str, Any]) -> None:
        if "reply_to" in message and message.get("outcome") == "notes":
            ahead = self._ahead.get(message["reply_to"])
            try:
                if ahead is not None:  # (else nobody waits any more)
                    ahead(decode_notes(message))
            except MalformedForward as exc:  # the reply carries them all the same
                log.error("replica_notes_malformed", error=str(exc))
            return
        if "reply_to" in message:
            waiting = self._replies.get(message["reply_to"])
            if waiting is not None and not waiting.done():
                waiting.set_result(message)
            return
        task = asyncio.create_task(self._answer(message))
        self._serving.add(task)
        task.add_done_callback(self._serving.discard)

    async def _answer(self, message: dict[str, Any]) -> None:
        asker, number = message.get("from"), message.get("id")
        if not isinstance(asker, str) or not isinstance(number, int):
            log.error("replica_message_unaddressed", keys=sorted(message))
            return

        async def relay(notes: NotesAhead) -> None:
            await self.store.send(asker, {**encode_notes(notes), "reply_to": number})

        try:
            with tracing.forwarded(message):  # in the asker's trace
                reply = await self._serve(decode_request(message), relay)
        except MalformedForward as exc:
            # Answered all the same: the asker's client hears at once, not in 30 s.
            log.error("replica_message_malformed", sender=asker, error=str(exc))
            refusal = ProxyError(f"this proxy replica cannot read the request: {exc}")
            reply = Refused(refusal.http_status, refusal.to_jsonrpc())
        except StoreError as exc:  # the store failed the holder: the asker's client hears
            refused = unavailable("serve a forwarded request", exc)
            reply = Refused(refused.http_status, refused.to_jsonrpc())
        # Sent again while the store fails (the asker drops a second reply), then on
        # with backoff: the asker waits for it (an MRTR retry's, for as long as the call
        # runs here), and nothing else would tell it the request's fate.
        message = {**encode_reply(reply), "reply_to": number}
        doing = "reply to another replica"
        try:
            await self._send(asker, message, doing, resend=True)
            return
        except StoreUnavailable as exc:
            log.warning("replica_reply_delayed", to=asker, error=str(exc))
        send = functools.partial(self.store.send, asker, message)
        try:
            await patiently(self.store, doing, send, wait=REPLY_PATIENCE_SECONDS)
        except StoreUnavailable as exc:
            log.warning("replica_reply_failed", to=asker, error=str(exc))
            return
        log.info("replica_reply_sent_late", to=asker)
