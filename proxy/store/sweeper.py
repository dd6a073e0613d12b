"""The store's sweep, owned: one periodic task from the store's open to shutdown.

A record past its ``expires_at`` is absent to every read (:mod:`proxy.store.base`), but
the memory and SQLite stores delete it only when something reads it again, or when
:meth:`Store.sweep` runs: a completed stream nobody resumes, a task nobody asks for
again, a dropped stream's tombstone a stopped proxy left in the SQLite file, would stay
for ever. Redis expires its keys itself (every key has a TTL); its sweep takes streams that
expired while live out of the buckets' live indexes.

:class:`Sweeper` calls :meth:`Store.sweep` every ``store.sweep_seconds``. The work of one
sweep is bounded per loop turn by the store (SQLite: a transaction of at most
:data:`~proxy.store.sqlite_db.SWEEP_EVENTS` events, the loop turning between them;
memory: :data:`~proxy.store.memory.SWEEP_CHUNK` records a turn). A sweep that fails (the
store unreachable) is logged and tried again at the next interval. The process's context
starts it with the store (:meth:`ProxyContext.open`) and stops it before the store closes
(:meth:`ProxyContext.close`).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

import structlog

from proxy.store.base import Store, StoreError

log = structlog.get_logger("proxy.store")

SWEEP_SECONDS = 60.0
"""The default interval (``store.sweep_seconds``)."""


class Sweeper:
    """Sweeps ``store`` every ``interval`` seconds, with ``clock`` (unix seconds) as now."""

    def __init__(
        self,
        store: Store,
        interval: float = SWEEP_SECONDS,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.store = store
        self.interval = interval
        self._clock = clock
        self._task: asyncio.Task[None] | None = None
        self.sweeps = 0  # sweeps ended (done or failed)
        self.swept = 0  # records deleted, in all
        self._ended = asyncio.Event()  # set at the end of each sweep (then replaced)

    @property
    def running(self) -> bool:
        return self._task is not None

    def start(self) -> None:
        """Sweep from now on (the first sweep one interval from now)."""
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run(), name="store-sweep")

    async def stop(self) -> None:
        """Cancel the task (a sweep under way stops between two of its transactions)."""
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self.interval)
            await self.sweep()

    async def sweep(self) -> int:
        """One sweep now: how many records went (0 when the store failed)."""
        try:
            gone = await self.store.sweep(self._clock())
        except StoreError as exc:
            log.warning("store_sweep_failed", store=self.store.kind, error=str(exc))
            gone = 0
        else:
            if gone:
                log.info("store_swept", store=self.store.kind, records=gone)
        self.sweeps += 1
        self.swept += gone
        ended, self._ended = self._ended, asyncio.Event()
        ended.set()
        return gone

    async def ended(self, sweeps: int) -> None:
        """Return once ``sweeps`` sweeps have ended (tests wait on it, not on time)."""
        while self.sweeps < sweeps:
            await self._ended.wait()
