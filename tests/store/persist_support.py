"""What the persister tests share: a stream key and the part of a session
:meth:`proxy.store.persist.Persister.note` reads."""

from __future__ import annotations

import asyncio

from proxy.store.base import Batch
from proxy.store.memory import MemoryStore

EPOCH = "e0e0e0"
KEY = f"{EPOCH}.1"


class NotingSession:
    """What :meth:`Persister.note` reads of a session."""

    session_id = "s1"
    epoch = EPOCH
    principal = None

    def client_ids(self, number: int) -> list[int]:
        return [number]


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
