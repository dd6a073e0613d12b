"""The table of a process's client sessions, without I/O: who holds which session, and
whether one more may start.

A session first takes a slot (:meth:`SessionTable.reserve`) before anything that waits, so
that sessions still starting count against the limits and concurrent ``initialize``
requests cannot overshoot them together; the slot becomes the session
(:meth:`SessionTable.admit`) once its upstream is up, or is given back
(:meth:`SessionTable.release`) when it fails to start. The adapter that starts sessions
(``proxy.registry.Registry``) does the awaiting; this module only decides.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from proxy.core.errors import Overloaded, SessionNotFound

Entry = TypeVar("Entry")


class Anyone:
    """The type of :data:`ANYONE`."""

    def __repr__(self) -> str:
        return "ANYONE"


ANYONE = Anyone()
"""A lookup without a principal check (requests another replica forwarded: the asker
checked, or names the principal itself)."""


@dataclass(frozen=True)
class ServerLimit:
    """One server's own bound on its sessions, and the config key that sets it (named in
    the refusal so an operator knows what to raise)."""

    max_sessions: int | None
    key: str  # e.g. "servers.docs" or "upstream"


@dataclass(frozen=True)
class SessionLimits:
    """The three bounds a new session must fit under: the proxy's
    (``sessions.max_sessions``), its server's, and its principal's
    (``auth.per_principal.max_sessions``)."""

    max_sessions: int
    servers: Mapping[str, ServerLimit] = field(default_factory=dict)
    per_principal: int | None = None


@dataclass(frozen=True)
class Reservation:
    """A slot taken by a session that is still starting."""

    number: int  # tells two reservations of the same server and principal apart
    server: str
    principal: str | None


@dataclass(frozen=True)
class _Row(Generic[Entry]):
    entry: Entry
    server: str
    principal: str | None


class SessionTable(Generic[Entry]):
    """Live sessions by id, and the slots of those still starting."""

    def __init__(self, limits: SessionLimits) -> None:
        self.limits = limits
        self._rows: dict[str, _Row[Entry]] = {}
        self._starting: set[Reservation] = set()
        self._reserved = 0

    # ------------------------------------------------------------------ reading
    def __len__(self) -> int:
        """The live sessions (not those still starting)."""
        return len(self._rows)

    def __contains__(self, session_id: object) -> bool:
        return session_id in self._rows

    def entries(self) -> Iterator[Entry]:
        """The live sessions, in the order they were admitted."""
        return (row.entry for row in list(self._rows.values()))

    @property
    def starting(self) -> int:
        """Slots taken by sessions whose upstream is still starting."""
        return len(self._starting)

    def held_by_server(self, server: str) -> int:
        """Sessions of ``server``, live or starting."""
        live = sum(1 for row in self._rows.values() if row.server == server)
        return live + sum(1 for r in self._starting if r.server == server)

    def held_by_principal(self, principal: str) -> int:
        """Sessions of ``principal``, live or starting."""
        live = sum(1 for row in self._rows.values() if row.principal == principal)
        return live + sum(1 for r in self._starting if r.principal == principal)

    def lookup(
        self, session_id: str, principal: str | Anyone | None = ANYONE, server: str | None = None
    ) -> Entry:
        """The session ``session_id``. ``SessionNotFound`` also when it belongs to another
        principal than the one given (authentication: never another's session), or to
        another server than the one given (its id was sent to the wrong path); the three
        cases read the same, so a client cannot probe for ids it does not hold."""
        row = self._rows.get(session_id)
        if row is None:
            raise SessionNotFound("Session not found")
        if not isinstance(principal, Anyone) and row.principal != principal:
            raise SessionNotFound("Session not found")
        if server is not None and row.server != server:
            raise SessionNotFound("Session not found")
        return row.entry

    # ------------------------------------------------------------------ changing
    def reserve(self, server: str, principal: str | None) -> Reservation:
        """A slot for one more session of ``server`` for ``principal``; ``Overloaded``
        (reason ``too_many_sessions``) when it would pass the proxy's, the server's or
        the principal's limit, checked in that order."""
        limits = self.limits
        if len(self._rows) + len(self._starting) >= limits.max_sessions:
            raise Overloaded(
                f"Too many sessions (sessions.max_sessions={limits.max_sessions}); try again later",
                reason="too_many_sessions",
            )
        own = limits.servers.get(server, ServerLimit(None, server))
        if own.max_sessions is not None and self.held_by_server(server) >= own.max_sessions:
            raise Overloaded(
                f"Too many sessions of {server} ({own.key}.max_sessions="
                f"{own.max_sessions}); try again later",
                reason="too_many_sessions",
            )
        mine = limits.per_principal
        if principal is not None and mine is not None and self.held_by_principal(principal) >= mine:
            raise Overloaded(
                f"Too many sessions for {principal} (auth.per_principal.max_sessions="
                f"{mine}); end one first",
                reason="too_many_sessions",
            )
        self._reserved += 1
        reservation = Reservation(self._reserved, server, principal)
        self._starting.add(reservation)
        return reservation

    def release(self, reservation: Reservation) -> None:
        """Give a slot back: its session did not start. Releasing twice is harmless."""
        self._starting.discard(reservation)

    def admit(self, reservation: Reservation, session_id: str, entry: Entry) -> None:
        """The reserved slot becomes the live session ``session_id``."""
        if reservation not in self._starting:
            raise ValueError(f"{reservation} is not a slot held by a starting session")
        if session_id in self._rows:
            raise ValueError(f"session {session_id[:8]} is in the table already")
        self._starting.discard(reservation)
        self._rows[session_id] = _Row(entry, reservation.server, reservation.principal)

    def remove(self, session_id: str) -> Entry | None:
        """Forget ``session_id``; its entry, or None when it was not in the table."""
        row = self._rows.pop(session_id, None)
        return row.entry if row is not None else None
