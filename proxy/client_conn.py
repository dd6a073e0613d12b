"""One client response stream as the runtime holds it: a :class:`ClientConn` and its
:class:`ConnQueue`, filled by :class:`~proxy.runtime.SessionRunner` as the core decides and
written out by the transport (``/mcp``'s SSE writer, a WebSocket's virtual connection).

Every legacy call opens one, so it is kept cheap: slotted, and its queue is a deque with
at most one waiting reader (one future while it waits), not an :class:`asyncio.Queue`
(three deques, an event, a future per ``get``).
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Generic, TypeVar

from proxy.core.eventrun import EventRun
from proxy.core.events import ConnId, SendToClient
from proxy.store.persist import Persister

T = TypeVar("T")


class ConnFenced(ConnectionError):
    """This replica lost the connection's session to another (fencing): what waited for
    the store is never written; the client resumes from the store."""


@dataclass(frozen=True, slots=True)
class CloseMarker:
    retry_ms: int | None


@dataclass(frozen=True, slots=True)
class Frame:
    """One message for a connection with framing "message", and the event id it has."""

    event_id: str
    payload: bytes


class ConnQueue(Generic[T]):
    """What the core queued for one connection, read by one writer at a time.

    The subset of :class:`asyncio.Queue` the writers use (``empty``, ``qsize``,
    ``put_nowait``, ``get_nowait``, ``get``), plus :meth:`wait` (until something is
    queued or :meth:`wake` is called) and :meth:`take` (everything queued now)."""

    __slots__ = ("_items", "_listener", "_waiter")

    def __init__(self) -> None:
        self._items: deque[T] = deque()
        self._waiter: asyncio.Future[None] | None = None
        self._listener: Callable[[], object] | None = None

    def empty(self) -> bool:
        return not self._items

    def qsize(self) -> int:
        return len(self._items)

    def put_nowait(self, item: T) -> None:
        self._items.append(item)
        self.wake()

    def get_nowait(self) -> T:
        """The first item (``IndexError`` when empty)."""
        return self._items.popleft()

    def take(self) -> list[T]:
        """Every item queued now, in order (an empty list when none)."""
        items = list(self._items)
        self._items.clear()
        return items

    def clear(self) -> None:
        self._items.clear()

    def wake(self) -> None:
        """End the reader's :meth:`wait` (an item came, or its deadline passed), or call
        its :meth:`listen` callback soon."""
        waiter = self._waiter
        if waiter is not None:
            self._waiter = None
            if not waiter.done():
                waiter.set_result(None)
        elif self._listener is not None:
            listener, self._listener = self._listener, None
            asyncio.get_running_loop().call_soon(listener)

    def listen(self, callback: Callable[[], object]) -> None:
        """:meth:`wait` for a reader that is a callback, not a task: ``callback`` is called
        soon (never from inside :meth:`put_nowait`) after the next :meth:`wake`, once."""
        self._listener = callback

    async def wait(self) -> None:
        """Return once an item is queued or :meth:`wake` is called (at once if an item is
        queued now). One reader at a time."""
        if self._items:
            return
        waiter = asyncio.get_running_loop().create_future()
        self._waiter = waiter
        try:
            await waiter
        finally:
            if self._waiter is waiter:  # cancelled: no longer waiting
                self._waiter = None

    async def get(self) -> T:
        while not self._items:
            await self.wait()
        return self._items.popleft()


Item = bytes | EventRun | Frame | CloseMarker


class ClientConn:
    """One client response stream: the core decides, the transport writes the queue out."""

    __slots__ = (
        "_fenced",
        "_token",
        "closed",
        "first_event_id",
        "framing",
        "gate",
        "id",
        "lane",
        "last_event_id",
        "outcome",
        "priming",
        "queue",
        "queued_bytes",
        "replay_clock",
        "replay_events",
        "replay_left",
        "ticket",
    )

    def __init__(
        self,
        id: ConnId,
        framing: str = "sse",
        gate: Persister | None = None,
        lane: str = "",
    ) -> None:
        self.id = id
        # "sse": queue items are SSE frames; "message": bare JSON-RPC payloads (WebSocket),
        # priming events and retry hints left out.
        self.framing = framing
        self.outcome: str | None = None  # "sse" or "accepted", set by the core's first command
        # framing "sse": SSE-encoded bytes, or an EventRun (a replay) framed when written;
        # framing "message": Frame
        self.queue: ConnQueue[Item] = ConnQueue()
        self.closed = False
        self.queued_bytes = 0  # in the queue, not yet handed to the socket
        self.replay_left = 0  # of those, a replay's (at the front of the queue)
        self.replay_events = 0  # events queued by the client's own request (a replay)
        self.replay_clock: float | None = None  # a resume's replay began (monotonic), metrics
        self.last_event_id: str | None = None  # of the last event queued (or priming seen)
        self.first_event_id: str | None = None  # of the first event ever queued
        self.priming: SendToClient | None = None  # the priming event it was given, if any
        # A durable store: what is queued may be written once batch ``ticket`` is stored.
        self.gate = gate
        self.ticket = 0
        self.lane = lane  # its session's epoch: the part of a batch it waits for (slices)
        self._fenced = False  # the session was lost (fencing): nothing more is written
        # The fencing token in force when it was made: what it queues is noted under it.
        self._token = "" if gate is None else gate.fence.token

    def __repr__(self) -> str:
        return f"ClientConn(id={self.id}, framing={self.framing!r}, closed={self.closed})"

    @property
    def fenced(self) -> bool:
        """The session was lost (fencing): nothing more is written. Also once the token
        it was made under went stale, whether or not anyone fenced it by name: a session
        a stop had forgotten before its last commit came back refused is in no list of
        sessions to lose, and what that commit held must not reach its client either."""
        if self._fenced:
            return True
        gate = self.gate
        if gate is not None and gate.fence.token != self._token:
            self._fenced = True
        return self._fenced

    async def stored(self, upto: int | None = None) -> None:
        """Wait until everything queued so far is in the store (the wire never runs
        ahead of it, DESIGN.md §9); at once with the memory store. Raises
        :class:`ConnFenced` once the session was lost: the store may have refused it.
        ``upto``: only what was queued when :attr:`ticket` was ``upto`` (items taken then)."""
        gate = self.gate
        ticket = self.ticket if upto is None else upto
        if gate is not None and not self.fenced and not gate.landed(ticket, self.lane):
            await gate.wait(ticket, lane=self.lane)
        if self.fenced:
            raise ConnFenced("this replica lost the session (fencing)")

    def fence(self) -> None:
        """Drop what is queued; :meth:`stored` raises from now on."""
        self.queue.clear()
        self.queued_bytes = self.replay_left = 0
        self._fenced = True

    def written(self, n: int) -> None:
        """The writer handed ``n`` bytes from the front of the queue to the socket."""
        self.queued_bytes -= n
        left = self.replay_left
        if left:  # (no max(): a builtin call per write showed)
            self.replay_left = left - n if left > n else 0
