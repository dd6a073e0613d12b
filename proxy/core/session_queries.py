"""What the runtime, the metrics and the status page read of a session (a part of
:class:`~proxy.core.session.Session`): counts, positions, the streams' numbers and a
snapshot. Nothing here changes the session."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from proxy.core.delivery import Delivery
from proxy.core.events import ConnId
from proxy.core.idmap import IdMap
from proxy.core.session_state import STANDALONE, StreamTable
from proxy.core.snapshot import SessionSnapshot
from proxy.core.stream import StreamState


class SessionQueries:
    """The queries of :class:`~proxy.core.session.Session`, which sets up these
    attributes."""

    created_at: float
    delivery: Delivery
    _ids: IdMap
    _streams: StreamTable

    if TYPE_CHECKING:  # the session's own, for the type checker

        @property
        def closed(self) -> bool: ...
        @property
        def upstream_paused(self) -> bool: ...
        @property
        def upstream_stopped(self) -> bool: ...

    @property
    def live_requests(self) -> int:
        return len(self._ids)

    @property
    def buffered_bytes(self) -> int:
        return sum(s.log.bytes for s in self._streams.values())

    def stream_numbers(self) -> list[int]:
        return sorted(self._streams)

    def sent_upto(self, number: int) -> int:
        """The highest seq of stream ``number`` ever handed to a connection (0: none)."""
        stream = self._streams.get(number)
        return stream.sent_upto if stream is not None else 0

    def stream_of(self, conn: ConnId) -> int | None:
        """The stream ``conn`` reads, if any."""
        return self.delivery.by_conn.get(conn)

    def client_ids(self, number: int) -> list[Any]:
        """The client's ids of the requests in flight on stream ``number``."""
        stream = self._streams.get(number)
        if stream is None or not stream.pending:  # (most calls': answered by the commit)
            return []
        found = (self._ids.pending(upstream_id) for upstream_id in sorted(stream.pending))
        return [p.client_id for p in found if p is not None]

    def stream_counts(self) -> tuple[int, int]:
        """(live request streams, events held by all its stream logs), for metrics."""
        live = events = 0
        for number, stream in self._streams.items():
            events += len(stream.log)
            if number != STANDALONE and stream.state is StreamState.LIVE:
                live += 1
        return live, events

    def snapshot(self) -> SessionSnapshot:
        """This session and its streams right now, as values (the status page)."""
        streams = self._streams.values()
        return SessionSnapshot.of(
            self.created_at,
            self.closed,
            self.upstream_paused,
            streams,
            upstream_stopped=self.upstream_stopped,
        )
