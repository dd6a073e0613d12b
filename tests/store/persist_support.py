"""What the persister tests share: a stream key, the part of a session
:meth:`proxy.store.persist.Persister.note` reads, and a persister on an opened store
(:func:`persisting`)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

from proxy.store.base import Batch, Store
from proxy.store.fencing import Fence
from proxy.store.memory import MemoryStore
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


class Noting:
    """What :meth:`Persister.note` reads of a session."""

    principal = None

    def __init__(self, epoch: str) -> None:
        self.epoch = epoch
        self.session_id = f"s-{epoch}"

    def client_ids(self, number: int) -> list[int]:
        return [number]


def appends(number: int, first: int, n: int) -> list[tuple[int, int, bytes, int]]:
    return [(number, seq, b'{"n":%d}' % seq, 0) for seq in range(first, first + n)]


class HeldStore(MemoryStore):
    """A memory store whose commits each wait until the test lets them go (a slow
    round trip under a burst), recording what each held."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: list[Batch] = []
        self.gates: list[asyncio.Event] = []

    async def commit(self, batch: Batch, now: float) -> list[str]:
        gate = asyncio.Event()
        self.seen.append(batch)
        self.gates.append(gate)
        await gate.wait()
        return await super().commit(batch, now)
