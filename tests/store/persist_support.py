"""What the persister tests share: a stream key and the part of a session
:meth:`proxy.store.persist.Persister.note` reads."""

from __future__ import annotations

EPOCH = "e0e0e0"
KEY = f"{EPOCH}.1"


class NotingSession:
    """What :meth:`Persister.note` reads of a session."""

    session_id = "s1"
    epoch = EPOCH
    principal = None

    def client_ids(self, number: int) -> list[int]:
        return [number]
