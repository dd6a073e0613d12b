"""What the persister tests share: a stream key, the part of a session
:meth:`proxy.store.persist.Persister.note` reads, and a persister on an opened store
(:func:`persisting`)."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

from proxy.store.base import Store
from proxy.store.fencing import Fence
from proxy.store.persist import Persister

EPOCH = "e0e0e0"
KEY = f"{EPOCH}.1"


class NotingSession:
    """What :meth:`Persister.note` reads of a session."""

    session_id = "s1"
    epoch = EPOCH
    principal = None

    def client_ids(self, number: int) -> list[int]:
        return [number]


@contextlib.asynccontextmanager
async def persisting(store: Store, fence: Fence | None = None) -> AsyncIterator[Persister]:
    """A persister (owner ``a``, 60 s retention) on the opened ``store``, under ``fence``
    (a new one by default); it and then the store are closed on the way out."""
    persister = Persister(store, "a", 60.0, fence or Fence("a"))
    try:
        yield persister
    finally:
        await persister.close()
        await store.close()
