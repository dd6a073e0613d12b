"""The store seam: everything that must outlive a connection, one async contract.

A store keeps, per stream, an append-only **log** of events (numbered by the session's
core: the store never picks a number) and a **record** (which session made it and whose
that session is, whether it is still live, its retained range, when it expires); per
session a **record** and an
ownership **lease**; and **task** records (for the Tasks work to come). Three
implementations share this contract and one test suite (``tests/store/``):

- :mod:`proxy.store.memory`: the process's own memory. Dies with the process.
- :mod:`proxy.store.sqlite`: one file, WAL; survives a restart of the proxy.
- :mod:`proxy.store.redis`: Redis ≥ 7 or Valkey; shared by replicas.

Keys: a stream's key is ``"<epoch>.<number>"`` (the session's random epoch and the
stream's number: the seed's ``streamId``), so an event id ``<epoch>.<number>.<seq>``
names its log without any other lookup.

Rules every implementation keeps (the contract suite checks each):

- :meth:`Store.commit` applies a whole :class:`Batch` atomically and durably (to the
  store's promise) before it returns; only then may any of its events reach a client.
- A log's entries are kept in seq order with no gap. An append whose seq is not the next
  one leaves a gap only when the log lost history (a flushed Redis): the record's
  ``first_seq`` moves past the hole, so a read from before it raises
  ``history_truncated``, never a partial replay.
- Each log keeps at most ``max_events`` entries (the oldest go, ``first_seq`` moves).
- A record past ``expires_at`` is gone (with its log), as if never made.
- Reads raise :class:`~proxy.core.errors.ResumeError` with the same reasons the core
  uses: ``unknown_stream``, ``unknown_position``, ``history_truncated``.
- :meth:`Store.epoch` is minted when the store's data is created; a store that lost its
  data (a new memory store, a deleted file, a flushed Redis) has a new one.
- **Fencing** (:mod:`proxy.store.fencing`): every record holds the fencing token of its
  writer (``fence``). A batch carries its writer's token; on each key it touches whose
  record holds another token, *nothing* of the batch is applied and the key is returned
  as refused (checked and applied in one atomic step, touching only that stream's keys).
  A :attr:`Batch.takeovers` entry is the only way to change a record's token: a
  compare-and-set on a LIVE record's token and ``last_seq``.
"""

from __future__ import annotations

import abc
import asyncio
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from proxy.core.errors import ResumeError
from proxy.core.resume_rules import HeldIn, check_position
from proxy.core.stream import Mark, Unacknowledged

LIVE = "live"
COMPLETED = "completed"


class StoreError(Exception):
    """The store cannot be reached or refused a write: the caller answers 503."""


class Entry(NamedTuple):
    """One event of a log: its position, its bytes, and what a poll reports of it.

    A named tuple, not a dataclass: one is made per event stored and per event read
    back, and a tuple is made in a third of the time (``Entry._make`` of a row)."""

    seq: int
    payload: bytes
    mark: int = int(Mark.NONE)


@dataclass(slots=True)
class StreamRecord:
    """What a replica needs to serve a stream it does not own (or a restart to end it)."""

    key: str  # "<epoch>.<number>"
    session_id: str
    owner: str = ""  # the replica that holds the session's upstream
    state: str = LIVE  # LIVE or COMPLETED
    first_seq: int = 1  # the oldest retained entry (last_seq + 1 when none)
    last_seq: int = 0
    request_ids: list[Any] = field(default_factory=list)  # the client's ids it answers
    announced: bool = False  # the seed's notifications/stream/create was sent for it
    expires_at: float | None = None  # unix seconds; None: no limit set yet
    # Who its session belongs to (inbound auth; None: nobody). Only that principal is
    # served the stream; "" is a name like any other, not None.
    principal: str | None = None
    # The server whose path the session was made on (``servers:`` names; "default" for
    # ``upstream:`` alone). None: a record written before servers were recorded (see
    # :func:`proxy.core.stream_access.may_read` for who may read it).
    server: str | None = None
    # The fencing token of the writer that holds it ("" before fencing existed).
    fence: str = ""

    @property
    def number(self) -> int:
        return int(self.key.rpartition(".")[2])

    @property
    def epoch(self) -> str:
        return self.key.rpartition(".")[0]


@dataclass(slots=True)
class SessionRecord:
    session_id: str
    epoch: str
    owner: str
    protocol_version: str | None = None
    expires_at: float | None = None


@dataclass(frozen=True, slots=True)
class Takeover:
    """What a record must hold for a batch to take it over (a compare-and-set)."""

    fence: str  # its current token
    last_seq: int  # its last entry (the ending appended after it was computed from it)


def refused_by(record: StreamRecord | None, key: str, batch: Batch) -> bool:
    """Whether fencing refuses ``batch`` on ``key``, whose live record is ``record`` (None:
    none): a takeover whose expectation fails, or a record of another writer's token."""
    takeover = batch.takeovers.get(key)
    if takeover is not None:
        return record is None or not (
            record.state == LIVE
            and record.fence == takeover.fence
            and record.last_seq == takeover.last_seq
        )
    return record is not None and record.fence != batch.fence


@dataclass(slots=True)
class Batch:
    """Everything one loop turn of one or more sessions changed, committed at once.

    Applied in this order: ``streams`` (a new key: the record as given; a key that has a
    record: only its ``session_id``, ``principal``, ``server``, ``owner``, ``request_ids``
    and ``announced`` change, its positions, state, expiry and log stay), ``appends`` (per
    key, in seq order; the record's ``last_seq`` follows), ``trimmed`` (per key, the first
    seq the session still keeps: the entries before it go and ``first_seq`` moves up to
    it, never past ``last_seq + 1``; the session decides what is dropped, the store
    follows), ``completed`` (state COMPLETED and the new ``expires_at``), ``dropped``
    (record and log gone).

    Fencing: ``fence`` is the writer's token and ``owner`` the writer (a record an append
    re-creates after a lost history names them). A key whose record holds another token
    is refused whole (:meth:`Store.commit` returns it); a new record takes ``fence``.
    ``takeovers`` (key -> :class:`Takeover`) first move a LIVE record whose token and
    ``last_seq`` are as expected to ``fence`` (a reaper ending a lost replica's stream),
    else the key is refused.
    """

    streams: list[StreamRecord] = field(default_factory=list)
    appends: dict[str, list[Entry]] = field(default_factory=dict)
    completed: dict[str, float] = field(default_factory=dict)  # key -> expires_at
    dropped: list[str] = field(default_factory=list)
    trimmed: dict[str, int] = field(default_factory=dict)  # key -> first seq kept
    fence: str = ""  # the writer's fencing token
    owner: str = ""  # the writer
    takeovers: dict[str, Takeover] = field(default_factory=dict)

    def __bool__(self) -> bool:
        return bool(
            self.streams
            or self.appends
            or self.trimmed
            or self.completed
            or self.dropped
            or self.takeovers
        )

    def touched(self) -> list[str]:
        """Every key the batch touches, once, in the order first named."""
        found = dict.fromkeys(r.key for r in self.streams)
        for named in (self.takeovers, self.appends, self.trimmed, self.completed, self.dropped):
            found.update(dict.fromkeys(named))
        return list(found)

    def without(self, refused: set[str]) -> Batch:
        """This batch with nothing for the ``refused`` keys (what a store applies)."""
        if not refused:
            return self
        return Batch(
            [r for r in self.streams if r.key not in refused],
            {k: v for k, v in self.appends.items() if k not in refused},
            {k: v for k, v in self.completed.items() if k not in refused},
            [k for k in self.dropped if k not in refused],
            {k: v for k, v in self.trimmed.items() if k not in refused},
            self.fence,
            self.owner,
            {k: v for k, v in self.takeovers.items() if k not in refused},
        )

    def events(self) -> int:
        return sum(map(len, self.appends.values()))


@dataclass(frozen=True, slots=True)
class StoreLimits:
    """Bounds every log keeps, and how long a live record lives without a write.

    ``max_events`` is the store's own backstop; a session's logs say what they drop
    (:attr:`Batch.trimmed`), which the store follows first."""

    max_events: int = 100_000
    live_ttl: float = 600.0  # seconds; refreshed by every append


class Store(abc.ABC):
    """The async contract. One instance per process; safe to call from one event loop."""

    kind: str = "abstract"
    durable: bool = False  # survives the process (sqlite, redis)
    shared: bool = False  # other processes see the same data (redis)
    # How long a client's request waits for the store to answer before it is refused
    # (proxy/store/unavailable.py); store.unavailable_wait_seconds.
    unavailable_wait: float = 5.0
    # :meth:`commit_now` works: a commit is done before it returns, with no wait worth
    # a loop turn (sqlite with synchronous normal: no fsync).
    commits_at_once: bool = False

    def __init__(self, limits: StoreLimits) -> None:
        self.limits = limits
        self._epoch = ""
        self._inboxes: dict[str, asyncio.Queue[dict[str, Any]]] = {}

    @property
    def epoch(self) -> str:
        """This store's history epoch (see module doc). Valid after :meth:`open`."""
        return self._epoch

    # ------------------------------------------------------------------ lifetime
    @abc.abstractmethod
    async def open(self) -> None:
        """Connect / create; mint the epoch if the data is new. Raises StoreError."""

    @abc.abstractmethod
    async def close(self) -> None:
        """Release connections and threads; wakes every :meth:`tail` (which ends)."""

    async def current_epoch(self) -> str:
        """Read the epoch again (a shared store may have been flushed since open)."""
        return self._epoch

    # ------------------------------------------------------------------ logs
    @abc.abstractmethod
    async def commit(self, batch: Batch, now: float) -> list[str]:
        """Apply ``batch`` atomically; return once durable. ``now``: unix seconds.

        Returns the keys refused by fencing (nothing of the batch was applied to them);
        empty when the writer's token holds on every key."""

    def commit_now(self, batch: Batch, now: float) -> list[str]:
        """:meth:`commit`, done before it returns (only when :attr:`commits_at_once`)."""
        raise NotImplementedError(f"the {self.kind} store commits only with await")

    def commit_soon(
        self, batch: Batch, now: float, landed: Callable[[list[str] | Exception], None]
    ) -> bool:
        """:meth:`commit` started without a task: ``landed`` gets what it returns, or
        the error (not retried), from the store's own I/O callback. False, nothing
        started: the caller awaits :meth:`commit` (the default; redis overrides it)."""
        return False

    @abc.abstractmethod
    async def get_stream(self, key: str, now: float) -> StreamRecord | None:
        """The record, or None if there is none (never made, dropped or expired)."""

    @abc.abstractmethod
    async def read(self, key: str, after: int, now: float, limit: int | None = None) -> list[Entry]:
        """Entries after seq ``after`` (at most ``limit``), oldest first.

        Raises ResumeError ``unknown_stream`` (no record), ``unknown_position`` (``after``
        beyond ``last_seq`` or negative), ``history_truncated`` (``after + 1 <
        first_seq``).
        """

    async def snapshot(
        self, key: str, after: int, now: float, limit: int | None = None
    ) -> tuple[StreamRecord | None, list[Entry]]:
        """The record (None: there is none) and the entries after ``after`` (at most
        ``limit``) as :meth:`read` gives them, read together where the store can (Redis:
        one MULTI; here the record, then the entries). A position the record refuses
        comes with no entries: the caller, once it knows from the record that this
        reader may have the stream, asks :func:`check_read` why."""
        record = await self.get_stream(key, now)
        if not readable_after(record, after):
            return record, []
        return record, await self.read(key, after, now, limit)

    @abc.abstractmethod
    def tail(self, key: str, after: int) -> AsyncIterator[list[Entry]]:
        """Entries after ``after`` as they are committed, in order, in batches.

        Ends after the last entry of a COMPLETED stream; raises ResumeError if the stream
        is gone or its history truncated past the reader. Blocks without polling (memory
        and sqlite: an in-process wake-up; redis: blocking reads). Cancel it to stop.
        """

    @abc.abstractmethod
    async def summary(self, key: str, after: int, now: float) -> Unacknowledged:
        """What a ``stream/poll`` reports of the entries after ``after`` (counted from
        their marks); the same errors as :meth:`read`."""

    @abc.abstractmethod
    async def live_streams(self, owner: str | None, now: float) -> list[StreamRecord]:
        """Every LIVE record (of ``owner`` only, unless None): a restart ends them."""

    # ------------------------------------------------------------------ sessions, leases
    @abc.abstractmethod
    async def put_session(self, record: SessionRecord) -> None: ...

    @abc.abstractmethod
    async def get_session(self, session_id: str, now: float) -> SessionRecord | None: ...

    @abc.abstractmethod
    async def drop_session(self, session_id: str) -> None: ...

    @abc.abstractmethod
    async def acquire_lease(self, name: str, owner: str, ttl: float, now: float) -> bool:
        """Take ``name`` for ``owner`` for ``ttl`` seconds if it is free, expired, or
        already ``owner``'s (then it is renewed). True if ``owner`` holds it now."""

    @abc.abstractmethod
    async def renew_lease(self, name: str, owner: str, ttl: float, now: float) -> bool:
        """Extend ``name`` by ``ttl`` if ``owner`` holds it now; False (and nothing taken)
        if it lapsed or another holds it: the holder learns that it lost it."""

    @abc.abstractmethod
    async def release_lease(self, name: str, owner: str) -> None:
        """Give it up, if ``owner`` holds it."""

    @abc.abstractmethod
    async def lease_owner(self, name: str, now: float) -> str | None: ...

    async def session_and_lease(
        self, session_id: str, lease: str, now: float
    ) -> tuple[SessionRecord | None, str | None]:
        """:meth:`get_session` and :meth:`lease_owner` of ``lease`` (the lease of the
        replica last seen holding the session), in one round trip where the store can
        (Redis: one pipeline); here one after the other."""
        return await self.get_session(session_id, now), await self.lease_owner(lease, now)

    # ------------------------------------------------------------------ tasks
    @abc.abstractmethod
    async def put_task(self, task_id: str, record: dict[str, Any], expires_at: float) -> bool:
        """Write a task's record; False (nothing written) when the record held is final
        (its ``status`` in :data:`~proxy.core.taskrecord.TERMINAL`): a task ended once,
        e.g. orphaned by another replica after its holder's lease lapsed, stays ended, so
        a holder that wakes up late never gives a second outcome (atomic in each store)."""

    @abc.abstractmethod
    async def get_task(self, task_id: str, now: float) -> dict[str, Any] | None: ...

    # ------------------------------------------------------------------ messages
    async def send(self, to: str, message: dict[str, Any]) -> None:
        """Put a JSON-able ``message`` in replica ``to``'s inbox (forwarded requests and
        their replies). A store not shared between processes keeps inboxes in-process; a
        shared one delivers across replicas, and drops what nobody takes within a minute."""
        self._inbox(to).put_nowait(message)

    async def receive(self, owner: str) -> AsyncIterator[dict[str, Any]]:
        """``owner``'s messages, in the order sent, as they come (blocking, no polling)."""
        inbox = self._inbox(owner)
        while True:
            yield await inbox.get()

    def _inbox(self, owner: str) -> asyncio.Queue[dict[str, Any]]:
        found = self._inboxes.get(owner)
        if found is None:
            found = self._inboxes[owner] = asyncio.Queue()
        return found

    # ------------------------------------------------------------------ housekeeping
    async def sweep(self, now: float) -> int:
        """Delete what expired before ``now``; how many records went. (Redis: its TTLs.)"""
        return 0


def check_read(record: StreamRecord | None, after: int) -> StreamRecord:
    """The errors :meth:`Store.read` raises, from the record alone (shared by the stores):
    no such stream, else the position rules of :mod:`proxy.core.resume_rules`."""
    if record is None:
        raise ResumeError("the stream has expired or never existed", reason="unknown_stream")
    check_position(after, first_kept=record.first_seq, last=record.last_seq, held_in=HeldIn.STORE)
    return record


def readable_after(record: StreamRecord | None, after: int) -> bool:
    """Whether :func:`check_read` lets a reader at ``after`` read ``record``'s stream
    (None: there is none)."""
    try:
        check_read(record, after)
    except ResumeError:
        return False
    return True


def read_to_end(record: StreamRecord, after: int) -> bool:
    """Whether a reader at ``after`` has the whole of ``record``'s stream: it completed
    (its last entry is final) and nothing is left after ``after``. A tail that yielded
    up to there ends without reading again (a round trip less for each stream followed
    to its end from Redis: a forwarded call, a resume on another replica)."""
    return record.state == COMPLETED and after >= record.last_seq


def count_marks(entries: Sequence[Entry]) -> Unacknowledged:
    requests = sum(1 for e in entries if e.mark & Mark.REQUEST)
    errors = sum(1 for e in entries if e.mark & Mark.ERROR)
    return Unacknowledged(len(entries), requests, errors)
