"""Read-only snapshots of a session and its streams, for the operator's status page.

A snapshot is taken in one go (no ``await`` between its parts), so it is one consistent
moment; it holds plain values, so nothing that reads it can change the session.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from proxy.core.session_state import STANDALONE, StreamSlot
from proxy.core.stream import StreamState


@dataclass(frozen=True)
class StreamSnapshot:
    """One stream: its number (:data:`STANDALONE` for the GET stream), state, whether a
    connection is attached, what its log holds, and when it began (the session's clock)."""

    number: int
    state: str
    attached: bool
    buffered_bytes: int
    events: int
    created_at: float

    @property
    def standalone(self) -> bool:
        return self.number == STANDALONE

    @property
    def live(self) -> bool:
        return self.state == StreamState.LIVE.value

    @classmethod
    def of(cls, stream: StreamSlot) -> StreamSnapshot:
        return cls(
            number=stream.number,
            state=stream.state.value,
            attached=stream.conn is not None,
            buffered_bytes=stream.log.bytes,
            events=len(stream.log),
            created_at=stream.created_at,
        )


@dataclass(frozen=True)
class SessionSnapshot:
    """One session: when it began (the session's clock), whether its upstream is gone
    (``closed``), held back (``paused``, overflow: block) or its process stopped for
    idleness (``upstream_stopped``), and its streams, oldest first."""

    created_at: float
    closed: bool
    paused: bool
    streams: tuple[StreamSnapshot, ...]
    upstream_stopped: bool = False

    @property
    def buffered_bytes(self) -> int:
        return sum(s.buffered_bytes for s in self.streams)

    @classmethod
    def of(
        cls,
        created_at: float,
        closed: bool,
        paused: bool,
        streams: Iterable[StreamSlot],
        *,
        upstream_stopped: bool = False,
    ) -> SessionSnapshot:
        shots = tuple(StreamSnapshot.of(s) for s in streams)
        return cls(created_at, closed, paused, shots, upstream_stopped)
