"""Which ``/ws`` socket carries a session's standalone stream, on the replica holding the
session (issue 19): a session's newest socket takes it, wherever that socket is.

A socket on this replica (*local*) reads the stream from the session, which hands its
connection the events after ``sent_upto`` (:meth:`proxy.core.session.Session._on_get`).
A socket on another replica (*remote*, :class:`~proxy.forwarding_seat.WsSocket`) follows
the stream from the shared log after the position it was given, and writes it itself.
Each event goes to exactly one socket:

- a newer socket takes the stream from a local one at once (the old one stops; the new
  one starts after what the old one was handed);
- from a remote one, by asking its replica to stop it
  (:class:`~proxy.forwarding_seat.StandaloneTakeover`): it stops between two frames and
  says the last one it wrote; the new socket starts after that one;
- a remote socket that closes says how far it wrote
  (:class:`~proxy.forwarding_seat.StandaloneRelease`): what comes after waits for the
  next socket, as it does when a local socket closes;
- a remote socket that cannot say (its replica died, or does not answer within
  :data:`TAKEOVER_WAIT_SECONDS`): the new socket starts after the last position it
  acknowledged (it may repeat what that socket wrote in its last second, never skip).

An HTTP ``GET`` listen stream (no ``Last-Event-ID``) on another replica is a remote
holder like a remote socket (its replica follows the log and names it alike): a newer
socket or ``GET`` takes the stream from it, and closing it says how far it wrote, so the
next ``GET`` anywhere starts after that, never again with what it wrote. An HTTP ``GET``
on this replica keeps the stream while open (sockets and other listen ``GET`` requests
are refused it, 409), and it is never taken over; it takes the stream from a remote holder
(:meth:`StandaloneSeat.clear_remote`).
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Awaitable, Callable
from typing import Protocol, TypeVar

import structlog

from proxy.core.errors import ProxyError
from proxy.core.session import Session
from proxy.forwarding_seat import StandaloneStopped, StandaloneTakeover, WsSocket
from proxy.replicas import Replicas
from proxy.store.base import StoreError
from proxy.store.unavailable import patiently

log = structlog.get_logger("proxy.ws")

TAKEOVER_WAIT_SECONDS = 5.0
"""How long a takeover waits for the replica of the socket that has the stream to stop it."""


class StandaloneHold:
    """A remote holder's hold of its session's standalone stream, followed from the log
    (a ``/ws`` socket's, or an HTTP ``GET``'s): how far it wrote it; stopped between two
    events, never in the middle of one."""

    def __init__(self, after: int) -> None:
        self.written = after  # the seq of the last event written (or where it started)
        self.stopped = False
        self.lock = asyncio.Lock()  # held while an event is written
        self._wake: Callable[[], None] | None = None

    def on_stop(self, wake: Callable[[], None]) -> None:
        """Call ``wake`` once stopped (a writer waiting for the log's next event ends)."""
        self._wake = wake

    async def stop(self) -> int:
        """Write no more; the seq of the last event written."""
        async with self.lock:
            self.stopped = True
        if self._wake is not None:
            self._wake()
        return self.written


class LocalSocket(Protocol):
    """A socket on this replica that can carry the standalone stream."""

    def release_standalone(self) -> None:
        """Stop carrying it now (a newer socket takes it)."""


Holder = LocalSocket | WsSocket
T = TypeVar("T")


class StandaloneSeat:
    """Which socket has one session's standalone stream (:class:`SessionRunner`'s)."""

    def __init__(self, session: Session) -> None:
        self._session = session
        self.holder: Holder | None = None
        self._acked = 0  # the remote holder's position, as last acknowledged
        self._released: dict[str, int] = {}  # remote sockets that closed: token → upto
        self._lock = asyncio.Lock()  # one takeover at a time

    async def take(
        self,
        new: Holder,
        replicas: Replicas | None,
        attach: Callable[[], Awaitable[tuple[int | None, T]]],
    ) -> T:
        """Give the stream to ``new``: stop whichever socket has it, then ``attach``,
        which attaches ``new`` and returns where it starts (None if it could not: then no
        socket has it) and what it made, which this returns."""
        async with self._lock:
            old = self.holder
            if old is not None and old != new:
                await self._stop(old, replicas)
            self.holder = None
            start, made = await attach()
            if start is not None:
                self.holder, self._acked = new, start
            return made

    async def _stop(self, old: Holder, replicas: Replicas | None) -> None:
        if not isinstance(old, WsSocket):
            old.release_standalone()
            return
        upto = await self._stop_remote(old, replicas)
        if self.holder is not old:  # it closed meanwhile, and said how far it wrote
            return
        if upto is None:
            upto = self._released.pop(old.token, self._acked)
        log.info("ws_standalone_taken_from", replica=old.replica, upto=upto)
        self._session.standalone_handed(upto)

    @staticmethod
    async def _stop_remote(old: WsSocket, replicas: Replicas | None) -> int | None:
        if replicas is None:
            return None
        try:
            alive = functools.partial(replicas.owner_alive, old.replica)
            if not await patiently(replicas.store, "look up a replica", alive):
                return None
            reply = await replicas.forward(  # (again while the store fails: answered alike)
                old.replica,
                StandaloneTakeover(old.token),
                timeout=TAKEOVER_WAIT_SECONDS,
                resend=True,
            )
        except (ProxyError, StoreError) as exc:
            log.warning("ws_standalone_not_stopped", replica=old.replica, error=str(exc))
            return None
        return reply.upto if isinstance(reply, StandaloneStopped) else None

    async def clear_remote(self, replicas: Replicas | None) -> None:
        """A ``GET`` on this replica takes the stream: stop the remote holder first, if
        one has it (a local socket has a connection on the stream: the ``GET`` is refused)."""
        if isinstance(self.holder, WsSocket):
            async with self._lock:
                old = self.holder
                if isinstance(old, WsSocket):
                    await self._stop(old, replicas)
                    self.holder = None

    def left(self, socket: LocalSocket) -> None:
        """``socket`` carries the stream no more (it closed, or its session ended)."""
        if self.holder is socket:
            self.holder = None

    def released(self, token: str, upto: int) -> None:
        """The remote socket ``token`` closed, having written up to ``upto``."""
        holder = self.holder
        if isinstance(holder, WsSocket) and holder.token == token:
            self.holder = None
            self._session.standalone_handed(upto)
        else:  # a takeover of it may be under way: it will find it here
            self._released[token] = upto
            while len(self._released) > 8:  # (only the latest can matter)
                del self._released[next(iter(self._released))]

    def acknowledged(self, seq: int) -> None:
        """The remote holder's client has the standalone stream up to ``seq``."""
        if isinstance(self.holder, WsSocket):
            self._acked = max(self._acked, seq)
