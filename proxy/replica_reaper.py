"""Ending what a dead replica left running, and the claim that makes "gone" hold
(:mod:`proxy.replicas`, DESIGN.md §9): :class:`Reaping`, a part of
:class:`~proxy.replicas.Replicas`.

Every half lease a replica looks for live streams whose holder's lease is gone; once it
was missing at two looks half a lease apart, the one that takes ``reaper:<owner>`` ends
them (``owner_lost``). The same key is the claim a replica takes before it acts on an
owner being gone in any other way (a 404 for its session, a call ended ``owner_lost``):
whoever holds it, an owner only cut off from the store finds it when it takes its lease
again and loses its sessions. A claimer looks at the lease once more after the claim,
and the owner at the claim after taking its lease, so one of them always sees the other.
"""

from __future__ import annotations

import asyncio
import time
from typing import Literal

import structlog

from proxy.replica_lease import LeaseClock
from proxy.store.base import Store, StoreError
from proxy.store.fencing import Fence
from proxy.store.open import end_orphans

log = structlog.get_logger("proxy.replicas")

REAPER_LEASE_SECONDS = 60.0
"""How long ``reaper:<owner>`` stays held: while it does, a replica that finds its lease
missing knows its streams were ended and loses its sessions."""

Claim = Literal["mine", "theirs", "back"]


class Reaping:
    """The reaper's loop and the claim; :class:`~proxy.replicas.Replicas` gives the store,
    the lease notes and the looks."""

    store: Store
    owner: str
    fence: Fence
    leases: LeaseClock
    lease_seconds: float
    _retention: float

    async def _check_epoch(self) -> None:
        raise NotImplementedError

    def _flushed_lately(self) -> bool:
        raise NotImplementedError

    async def _presumed_alive(self, owner: str) -> bool:
        raise NotImplementedError

    async def _holds_lease(self, owner: str) -> bool:
        raise NotImplementedError

    async def _claim(self, owner: str) -> Claim:
        """Take ``reaper:<owner>``, then look at ``owner``'s lease once more: ``"back"``
        (held again: alive after all, a claim of this replica's let go), else ``"mine"``
        or ``"theirs"`` (another replica holds the claim)."""
        reaper = f"reaper:{owner}"
        mine = await self.store.acquire_lease(reaper, self.owner, REAPER_LEASE_SECONDS, time.time())
        if not await self._holds_lease(owner):
            return "mine" if mine else "theirs"
        self.leases.note(owner, True)
        if mine:
            await self.store.release_lease(reaper, self.owner)
        return "back"

    async def _reap(self) -> None:
        while True:
            await asyncio.sleep(self.lease_seconds / 2)
            try:
                await self.reap_once()
            except StoreError as exc:
                log.warning("replica_reap_failed", error=str(exc))

    async def reap_once(self) -> int:
        """End the live streams of every replica whose lease lapsed; how many ended.

        Not for one lease after the store lost its data: the leases went with it, and
        their holders take them again within a third of one."""
        await self._check_epoch()
        if self._flushed_lately():
            return 0
        owners = {r.owner for r in await self.store.live_streams(None, time.time())}
        ended = 0
        for owner in sorted(owners - {self.owner}):
            # (Not owner_alive: the reaper claims an owner only once it was missing long.)
            if await self._presumed_alive(owner) or not self.leases.missing_long(owner):
                continue
            if await self._claim(owner) != "mine":
                continue  # another replica is at it, or it took its lost lease again
            log.info("replica_lost", owner=owner)
            ended += await end_orphans(
                self.store, owner, self._retention, "owner_lost", fence=self.fence.token
            )
        return ended
