"""The nemesis's Redis: a master and its replica, and the replicas' links to whichever is
the master (tests/nemesis/links.py): a planned failover swaps them, as a managed Redis's
maintenance or a Kubernetes operator does.

``failover()`` runs Redis' own ``FAILOVER TO`` on the master (it pauses writes, waits
until the replica has every one, then demotes itself and promotes the replica: nothing
is lost), then points every link at the new master for new connections. Connections
made before still reach the old master, now a replica: writes there get ``READONLY``,
and the store connects anew (proxy/store/redis.py). A replica that is not in step (just
resyncing after the master's restart) gets a bounded wait; a failover Redis refuses or
aborts is skipped and said so.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import redis.asyncio as aioredis

from tests.nemesis.links import RedisLink
from tests.redis_server import RedisServer

IN_STEP_S = 10.0  # how long a failover waits for the replica to be online
FAILOVER_MS = 5000  # FAILOVER's own TIMEOUT


class RedisPair:
    def __init__(self, servers: list[RedisServer], links: list[RedisLink]) -> None:
        self.servers = servers
        self.links = links
        self.master = 0  # index into servers
        self.failovers = 0

    @property
    def current(self) -> RedisServer:
        return self.servers[self.master]

    @property
    def replica(self) -> RedisServer:
        return self.servers[1 - self.master]

    async def replicate(self) -> None:
        """Make the second server the first's replica and wait until it is in step."""
        client = aioredis.Redis.from_url(self.replica.url)
        try:
            await client.replicaof("127.0.0.1", self.current.port)
        finally:
            await client.aclose()
        await self._in_step()

    async def failover(self, log: Callable[[str], None]) -> bool:
        """Swap master and replica (FAILOVER TO); whether it happened."""
        try:
            await self._in_step()
        except TimeoutError:
            log("nemesis: failover skipped: the replica is not in step")
            return False
        master = aioredis.Redis.from_url(self.current.url)
        try:
            await master.execute_command(
                "FAILOVER", "TO", "127.0.0.1", self.replica.port, "TIMEOUT", FAILOVER_MS
            )
        except aioredis.ResponseError as exc:
            log(f"nemesis: failover skipped: Redis refused it: {exc}")
            return False
        finally:
            await master.aclose()
        promoted = aioredis.Redis.from_url(self.replica.url)
        try:
            async with asyncio.timeout(FAILOVER_MS / 1000 + 5):
                while (await promoted.info("replication"))["role"] != "master":
                    await asyncio.sleep(0.02)
        except TimeoutError:
            log("nemesis: failover aborted by Redis (timed out): the master stays")
            return False
        finally:
            await promoted.aclose()
        self.master = 1 - self.master
        for link in self.links:
            link.target_port = self.current.port
        self.failovers += 1
        return True

    async def _in_step(self) -> None:
        """Until the master sees its replica online, past its first sync (TimeoutError
        after :data:`IN_STEP_S`); FAILOVER itself waits for the replica to have every
        write (under traffic the offset a replica acknowledges, once a second, is always
        behind the master's)."""
        master = aioredis.Redis.from_url(self.current.url)
        try:
            async with asyncio.timeout(IN_STEP_S):
                while True:
                    replica = (await master.info("replication")).get("slave0")
                    if isinstance(replica, dict) and replica.get("state") == "online":
                        return
                    await asyncio.sleep(0.05)
        finally:
            await master.aclose()
