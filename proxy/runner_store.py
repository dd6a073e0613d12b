"""One session runner's hand-off to the durable store's group commit.

After each step of its core (:meth:`~proxy.runtime.SessionRunner.feed`) the runner hands
what the core noted in its journal to the :class:`~proxy.store.persist.Persister`, and
every one of its connections waits behind the ticket that batch gets before it writes
(wire never ahead of store: :meth:`~proxy.client_conn.ClientConn.stored`). With the
memory store there is no persister and no :class:`StoreHandoff`.
"""

from __future__ import annotations

from collections.abc import Mapping

from proxy.client_conn import ClientConn
from proxy.core.events import ConnId
from proxy.core.session import Session
from proxy.store.persist import Persister

__all__ = ["StoreHandoff"]


class StoreHandoff:
    """What one session's steps hand to ``persister``, and the tickets its connections
    wait for."""

    __slots__ = ("_journal", "_lane", "_source", "persister")

    def __init__(self, persister: Persister, session: Session, server: str) -> None:
        self.persister = persister  # the gate its connections wait at
        self._lane = session.epoch  # its part of a batch (slices)
        self._journal = journal = session.keep_journal()
        # What the persister takes this session's journal with, at its flush (per turn).
        self._source = (session, journal, server)

    def hand_off(self, conns: Mapping[ConnId, ClientConn]) -> None:
        """Hand what the core noted to the group commit; hold ``conns`` behind it."""
        persister = self.persister
        j = self._journal
        # (an answer's appends, a request's new stream: no ``Journal.__bool__`` call)
        if j.appends or j.opened or j:
            # Named, not copied: the persister takes the journal once per loop turn.
            ticket = persister.noted(self._lane, self._source)
        else:
            ticket = persister.ticket
            if ticket <= persister.committed:
                return
        for conn in conns.values():
            conn.ticket = ticket

    async def caught_up(self) -> None:
        """Return once everything noted so far is in the store, without waiting for more
        (another replica waits to read what this one names)."""
        persister = self.persister
        await persister.wait(persister.ticket, hurry=True)
